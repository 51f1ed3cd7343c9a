/*-------------------------------------------------------------------------
 *
 * gr_agent.c
 *	  Client of the storage agent's control socket.
 *
 * The protocol is one JSON object per line each way (docs/storage-agent.md).
 * Replies are checked with the non-throwing JSON parser before they are
 * turned into jsonb, so a confused agent produces an error message here,
 * never an ERROR that would take the scheduler down.  The agent is another
 * process, possibly buggy or hostile: every number of a reply is checked
 * (gr_number.c) before use — counts and byte offsets exact whole numbers
 * in range, seconds finite and not negative.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "gr_agent.h"
#include "gr_number.h"
#include "gr_window.h"

/* Seconds an agent may take to answer one request. */
#define GR_AGENT_TIMEOUT_S	3

/* Largest reply accepted. */
#define GR_AGENT_MAX_REPLY	(256 * 1024)

bool
gr_agent_configured(void)
{
	return gr_agent_socket != NULL && gr_agent_socket[0] != '\0';
}

/* Send one request line and read one reply line; the reply is palloc'd. */
static char *
gr_agent_roundtrip(const char *request, char *err, size_t errlen)
{
	struct sockaddr_un addr;
	struct timeval tv = {GR_AGENT_TIMEOUT_S, 0};
	StringInfoData reply;
	int			sock;
	size_t		sent = 0;
	size_t		len = strlen(request);

	if (!gr_agent_configured())
	{
		snprintf(err, errlen, "no storage agent configured");
		return NULL;
	}

	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
	{
		snprintf(err, errlen, "could not create socket: %m");
		return NULL;
	}
	(void) setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void) setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strlcpy(addr.sun_path, gr_agent_socket, sizeof(addr.sun_path));
	if (connect(sock, (struct sockaddr *) &addr, sizeof(addr)) != 0)
	{
		snprintf(err, errlen, "could not connect to \"%s\": %m", gr_agent_socket);
		close(sock);
		return NULL;
	}

	while (sent < len)
	{
		ssize_t		n = send(sock, request + sent, len - sent, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
		{
			snprintf(err, errlen, "could not send to the storage agent: %m");
			close(sock);
			return NULL;
		}
		sent += n;
	}

	initStringInfo(&reply);
	for (;;)
	{
		char		buf[4096];
		ssize_t		n = recv(sock, buf, sizeof(buf), 0);
		char	   *newline;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
		{
			snprintf(err, errlen, "no reply from the storage agent: %m");
			break;
		}
		if (n == 0)
		{
			snprintf(err, errlen, "the storage agent closed the connection without a reply");
			break;
		}
		appendBinaryStringInfo(&reply, buf, n);
		newline = memchr(reply.data, '\n', reply.len);
		if (newline != NULL)
		{
			*newline = '\0';
			close(sock);
			return reply.data;
		}
		if (reply.len > GR_AGENT_MAX_REPLY)
		{
			snprintf(err, errlen, "reply from the storage agent exceeds %d bytes",
					 GR_AGENT_MAX_REPLY);
			break;
		}
	}
	close(sock);
	pfree(reply.data);
	return NULL;
}

/*
 * The JSON parser's callback for scalars: flags a number token that numeric
 * input could not take quietly (it raises an ERROR on some, and turns others
 * into values no agent sends).
 */
static void
gr_check_number_token(void *state, char *token, JsonTokenType tokentype)
{
	if (tokentype == JSON_TOKEN_NUMBER && !gr_json_number_token_ok(token))
		*(bool *) state = true;
}

/* Run a request and return its reply as jsonb, or NULL with err set. */
static Jsonb *
gr_agent_call(const char *request, char *err, size_t errlen)
{
	char	   *reply = gr_agent_roundtrip(request, err, errlen);
	JsonLexContext *lex;
	JsonSemAction check = {0};
	bool		bad_number = false;
	JsonbValue *ok;
	Jsonb	   *jb;

	if (reply == NULL)
		return NULL;

	check.semstate = &bad_number;
	check.scalar = gr_check_number_token;
	lex = makeJsonLexContextCstringLen(reply, strlen(reply), PG_UTF8, true);
	if (pg_parse_json(lex, &check) != JSON_SUCCESS)
	{
		snprintf(err, errlen, "malformed reply from the storage agent: %.80s", reply);
		return NULL;
	}
	if (bad_number)
	{
		snprintf(err, errlen, "malformed reply from the storage agent: a number is too long or of too large an exponent: %.80s",
				 reply);
		return NULL;
	}
	jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(reply)));
	if (!JB_ROOT_IS_OBJECT(jb))
	{
		snprintf(err, errlen, "reply from the storage agent is not an object");
		return NULL;
	}

	ok = getKeyJsonValueFromContainer(&jb->root, "ok", 2, NULL);
	if (ok == NULL || ok->type != jbvBool)
	{
		snprintf(err, errlen, "reply from the storage agent lacks \"ok\"");
		return NULL;
	}
	if (!ok->val.boolean)
	{
		JsonbValue *msg = getKeyJsonValueFromContainer(&jb->root, "error", 5, NULL);

		if (msg == NULL)
			msg = getKeyJsonValueFromContainer(&jb->root, "reason", 6, NULL);
		if (msg != NULL && msg->type == jbvString)
			snprintf(err, errlen, "%.*s", msg->val.string.len, msg->val.string.val);
		else
			snprintf(err, errlen, "the storage agent refused the request");
	}
	return jb;
}

static bool
gr_json_ok(Jsonb *jb)
{
	JsonbValue *ok = getKeyJsonValueFromContainer(&jb->root, "ok", 2, NULL);

	return ok != NULL && ok->type == jbvBool && ok->val.boolean;
}

static JsonbValue *
gr_json_key(JsonbContainer *container, const char *key)
{
	return getKeyJsonValueFromContainer(container, key, strlen(key), NULL);
}

/* What a number of a reply was, for gr_json_count() and gr_json_seconds(). */
typedef enum GrJsonNumber
{
	GR_JSON_ABSENT,				/* no such key */
	GR_JSON_VALID,
	GR_JSON_INVALID				/* present but unusable: err says why */
} GrJsonNumber;

/*
 * A count or byte offset of a reply: an exact whole number in [0, max],
 * read from the numeric's decimal text (never through a double, which
 * rounds above 2^53 and whose cast to an integer is undefined out of range).
 */
static GrJsonNumber
gr_json_value_count(JsonbValue *v, const char *key, uint64 max,
					uint64 *out, const char *op, char *err, size_t errlen)
{
	char	   *text;
	GrNumberStatus status;
	uint64_t	value;

	if (v->type != jbvNumeric)
	{
		snprintf(err, errlen, "reply to \"%s\": %s is not a number", op, key);
		return GR_JSON_INVALID;
	}
	text = DatumGetCString(DirectFunctionCall1(numeric_out,
											   NumericGetDatum(v->val.numeric)));
	status = gr_parse_count(text, max, &value);
	if (status != GR_NUMBER_OK)
	{
		snprintf(err, errlen, "reply to \"%s\": %s %s (%.40s)", op, key,
				 gr_number_problem(status), text);
		pfree(text);
		return GR_JSON_INVALID;
	}
	pfree(text);
	*out = value;
	return GR_JSON_VALID;
}

static GrJsonNumber
gr_json_count(JsonbContainer *container, const char *key, uint64 max,
			  uint64 *out, const char *op, char *err, size_t errlen)
{
	JsonbValue *v = gr_json_key(container, key);

	if (v == NULL)
		return GR_JSON_ABSENT;
	return gr_json_value_count(v, key, max, out, op, err, errlen);
}

/* A duration of a reply, in seconds: finite and not negative. */
static GrJsonNumber
gr_json_seconds(JsonbContainer *container, const char *key, double *out,
				const char *op, char *err, size_t errlen)
{
	JsonbValue *v = gr_json_key(container, key);
	double		value;

	if (v == NULL)
		return GR_JSON_ABSENT;
	if (v->type != jbvNumeric)
	{
		snprintf(err, errlen, "reply to \"%s\": %s is not a number", op, key);
		return GR_JSON_INVALID;
	}
	/* the token check bounds the exponent: no ERROR, at worst an infinity */
	value = DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
											   NumericGetDatum(v->val.numeric)));
	if (isinf(value) || isnan(value) || value < 0)
	{
		snprintf(err, errlen, "reply to \"%s\": %s is %s", op, key,
				 value < 0 ? "negative" : "too large");
		return GR_JSON_INVALID;
	}
	*out = value;
	return GR_JSON_VALID;
}

/* A number the reply must hold: false with err set when absent or invalid. */
static bool
gr_json_required(GrJsonNumber found, const char *op, const char *key,
				 char *err, size_t errlen)
{
	if (found == GR_JSON_ABSENT)
		snprintf(err, errlen, "reply to \"%s\" lacks %s", op, key);
	return found == GR_JSON_VALID;
}

static void
gr_json_string(JsonbContainer *container, const char *key, char *out, size_t outlen)
{
	JsonbValue *v = gr_json_key(container, key);

	if (v != NULL && v->type == jbvString)
		snprintf(out, outlen, "%.*s", v->val.string.len, v->val.string.val);
}

/* Request text with the volume name quoted as a JSON string. */
static char *
gr_agent_request(const char *op, const char *extra)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"op\":\"%s\",\"volume\":", op);
	escape_json(&buf, gr_agent_volume ? gr_agent_volume : "");
	if (extra)
		appendStringInfo(&buf, ",%s", extra);
	appendStringInfoString(&buf, "}\n");
	return buf.data;
}

bool
gr_agent_volume_info(GrVolumeInfo *out, char *err, size_t errlen)
{
	GrVolumeInfo reply = *out;
	GrVolumeInfo *info = &reply;
	Jsonb	   *jb = gr_agent_call(gr_agent_request("volume", NULL), err, errlen);
	JsonbValue *volume;
	JsonbValue *profile;

	if (jb == NULL || !gr_json_ok(jb))
		return false;

	volume = gr_json_key(&jb->root, "volume");
	if (volume == NULL || volume->type != jbvBinary)
	{
		snprintf(err, errlen, "reply to \"volume\" lacks the volume object");
		return false;
	}
	gr_json_string(volume->val.binary.data, "state", info->state, sizeof(info->state));

	/* The ledger is informative: an older agent without it is no error. */
	info->ios = -1;
	info->spin_ups = -1;
	{
		JsonbValue *ledger = gr_json_key(volume->val.binary.data, "ledger");
		uint64		reads;
		uint64		writes;
		uint64		spin_ups;
		GrJsonNumber r;
		GrJsonNumber w;
		GrJsonNumber u;

		if (ledger != NULL && ledger->type == jbvBinary)
		{
			JsonbContainer *l = ledger->val.binary.data;

			r = gr_json_count(l, "reads", PG_INT64_MAX, &reads, "volume", err, errlen);
			w = gr_json_count(l, "writes", PG_INT64_MAX, &writes, "volume", err, errlen);
			u = gr_json_count(l, "spin_ups", PG_INT64_MAX, &spin_ups, "volume", err, errlen);
			if (r == GR_JSON_INVALID || w == GR_JSON_INVALID || u == GR_JSON_INVALID)
				return false;
			if (r == GR_JSON_VALID && w == GR_JSON_VALID)
				info->ios = (double) reads + (double) writes;
			if (u == GR_JSON_VALID)
				info->spin_ups = (double) spin_ups;
		}
	}

	/*
	 * The ledger's spin-ups include a flash member's wakes, which are no disk
	 * start/stop; an agent that tells the spinning members' apart says so.
	 */
	{
		uint64		disk_spin_ups;
		GrJsonNumber d;

		d = gr_json_count(volume->val.binary.data, "disk_spin_ups", PG_INT64_MAX,
						  &disk_spin_ups, "volume", err, errlen);
		if (d == GR_JSON_INVALID)
			return false;
		if (d == GR_JSON_VALID)
			info->spin_ups = (double) disk_spin_ups;
	}

	profile = gr_json_key(volume->val.binary.data, "profile");
	if (profile == NULL || profile->type != jbvBinary)
	{
		snprintf(err, errlen, "reply to \"volume\" lacks the profile object");
		return false;
	}
	if (!gr_json_required(gr_json_seconds(profile->val.binary.data, "spin_up_s",
										  &info->spin_up_s, "volume", err, errlen),
						  "volume", "profile.spin_up_s", err, errlen) ||
		!gr_json_required(gr_json_seconds(profile->val.binary.data, "break_even_s",
										  &info->break_even_s, "volume", err, errlen),
						  "volume", "profile.break_even_s", err, errlen))
		return false;
	info->spin_down_s = 0;
	if (gr_json_seconds(profile->val.binary.data, "spin_down_s", &info->spin_down_s,
						"volume", err, errlen) == GR_JSON_INVALID)
		return false;
	/* all or nothing: a reply that fails a check leaves *out as it was */
	*out = reply;
	return true;
}

bool
gr_agent_wake(double *ready_in_s, char *err, size_t errlen)
{
	Jsonb	   *jb = gr_agent_call(gr_agent_request("wake", NULL), err, errlen);

	if (jb == NULL || !gr_json_ok(jb))
		return false;
	*ready_in_s = 0;
	return gr_json_seconds(&jb->root, "ready_in_s", ready_in_s, "wake",
						   err, errlen) != GR_JSON_INVALID;
}

bool
gr_agent_sleep(double expected_idle_s, bool *declined, char *err, size_t errlen)
{
	char		extra[64];
	Jsonb	   *jb;
	JsonbValue *v;

	*declined = false;
	snprintf(extra, sizeof(extra), "\"expected_idle_s\":%.3f", expected_idle_s);
	jb = gr_agent_call(gr_agent_request("sleep", extra), err, errlen);
	if (jb == NULL)
		return false;
	if (gr_json_ok(jb))
		return true;

	/* A declined sleep is an answer, not an agent failure. */
	v = gr_json_key(&jb->root, "declined");
	*declined = (v != NULL && v->type == jbvBool && v->val.boolean);
	return false;
}

bool
gr_agent_hint(const GrExtent *extents, int count, int *recorded,
			  char *err, size_t errlen)
{
	StringInfoData extra;
	Jsonb	   *jb;
	uint64		n;
	int			i;

	initStringInfo(&extra);
	appendStringInfoString(&extra, "\"extents\":[");
	for (i = 0; i < count; i++)
		appendStringInfo(&extra, "%s[" UINT64_FORMAT "," UINT64_FORMAT "]",
						 i > 0 ? "," : "", extents[i].offset, extents[i].length);
	appendStringInfoChar(&extra, ']');
	jb = gr_agent_call(gr_agent_request("hint", extra.data), err, errlen);
	pfree(extra.data);
	*recorded = 0;
	if (jb == NULL || !gr_json_ok(jb))
		return false;
	switch (gr_json_count(&jb->root, "extents", PG_INT32_MAX, &n, "hint", err, errlen))
	{
		case GR_JSON_INVALID:
			return false;
		case GR_JSON_VALID:
			*recorded = (int) n;
			break;
		case GR_JSON_ABSENT:
			break;
	}
	return true;
}

bool
gr_agent_set_temperature(const GrExtent *extents, int count, const char *temperature,
						 int *ranges, bool *refused, char *err, size_t errlen)
{
	StringInfoData extra;
	Jsonb	   *jb;
	uint64		n;
	int			i;

	initStringInfo(&extra);
	appendStringInfoString(&extra, "\"temperature\":");
	escape_json(&extra, temperature);
	appendStringInfoString(&extra, ",\"extents\":[");
	for (i = 0; i < count; i++)
		appendStringInfo(&extra, "%s[" UINT64_FORMAT "," UINT64_FORMAT "]",
						 i > 0 ? "," : "", extents[i].offset, extents[i].length);
	appendStringInfoChar(&extra, ']');
	jb = gr_agent_call(gr_agent_request("set_temperature", extra.data), err, errlen);
	pfree(extra.data);
	*ranges = 0;
	*refused = false;
	if (jb == NULL)
		return false;
	if (!gr_json_ok(jb))
	{
		/* The agent's own words: a layout without temperatures, too many ranges. */
		*refused = true;
		snprintf(err, errlen, "the storage agent refused set_temperature");
		gr_json_string(&jb->root, "error", err, errlen);
		return false;
	}
	if (!gr_json_required(gr_json_count(&jb->root, "ranges", PG_INT32_MAX, &n,
										"set_temperature", err, errlen),
						  "set_temperature", "ranges", err, errlen))
		return false;
	*ranges = (int) n;
	return true;
}

/*
 * "wake" with "writes_only" and the extents the window writes (issue 16):
 * the agent spins up only the members those writes touch now.
 */
bool
gr_agent_wake_writes_only(const GrExtent *extents, int count,
						  double *ready_in_s, char *err, size_t errlen)
{
	StringInfoData extra;
	Jsonb	   *jb;
	int			i;

	initStringInfo(&extra);
	appendStringInfoString(&extra, "\"writes_only\":true,\"extents\":[");
	for (i = 0; i < count; i++)
		appendStringInfo(&extra, "%s[" UINT64_FORMAT "," UINT64_FORMAT "]",
						 i > 0 ? "," : "", extents[i].offset, extents[i].length);
	appendStringInfoChar(&extra, ']');
	jb = gr_agent_call(gr_agent_request("wake", extra.data), err, errlen);
	pfree(extra.data);
	if (jb == NULL || !gr_json_ok(jb))
		return false;
	*ready_in_s = 0;
	return gr_json_seconds(&jb->root, "ready_in_s", ready_in_s, "wake",
						   err, errlen) != GR_JSON_INVALID;
}

/*
 * The volume's alignment boundaries inside [offset, offset + len): where the
 * agent would cut a request into member I/Os (chunk ends, member track ends).
 * *bounds is palloc'd in the current context, ascending; *complete_to is
 * where the list stops being complete (the agent caps its answer).  A layout
 * without boundaries answers with none (*aligned false).
 */
bool
gr_agent_boundaries(uint64 offset, uint64 len, uint64 **bounds, int *nbounds,
					uint64 *complete_to, bool *aligned, char *err, size_t errlen)
{
	char		extra[96];
	Jsonb	   *jb;
	JsonbValue *list;
	JsonbValue *flag;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	uint64		to;
	int			n = 0;
	int			capacity;
	uint64		prev = offset;

	*bounds = NULL;
	*nbounds = 0;
	*aligned = false;
	*complete_to = offset;
	snprintf(extra, sizeof(extra),
			 "\"offset\":" UINT64_FORMAT ",\"len\":" UINT64_FORMAT, offset, len);
	jb = gr_agent_call(gr_agent_request("boundaries", extra), err, errlen);
	if (jb == NULL || !gr_json_ok(jb))
		return false;

	flag = gr_json_key(&jb->root, "aligned");
	list = gr_json_key(&jb->root, "boundaries");
	if (flag == NULL || flag->type != jbvBool || list == NULL ||
		list->type != jbvBinary || !JsonContainerIsArray(list->val.binary.data))
	{
		snprintf(err, errlen, "reply to \"boundaries\" lacks aligned, boundaries or complete_to");
		return false;
	}
	if (!gr_json_required(gr_json_count(&jb->root, "complete_to", PG_UINT64_MAX, &to,
										"boundaries", err, errlen),
						  "boundaries", "aligned, boundaries or complete_to", err, errlen))
		return false;
	*aligned = flag->val.boolean;
	capacity = Max(JsonContainerSize(list->val.binary.data), 1);
	*bounds = palloc(sizeof(uint64) * capacity);

	/* Every entry a number inside the range, ascending; anything else voids it. */
	it = JsonbIteratorInit(list->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		uint64		b;

		if (tok != WJB_ELEM)
			continue;
		if (n >= capacity)
			break;
		if (gr_json_value_count(&v, "a boundary", PG_UINT64_MAX, &b, "boundaries",
								err, errlen) != GR_JSON_VALID)
		{
			pfree(*bounds);
			*bounds = NULL;
			*aligned = false;
			return false;
		}
		if (b <= prev || b >= offset + len)
			break;
		prev = b;
		(*bounds)[n++] = prev;
	}
	if (n != JsonContainerSize(list->val.binary.data) || to < offset ||
		to > offset + len)
	{
		snprintf(err, errlen, "reply to \"boundaries\" has a boundary out of order or outside the range");
		pfree(*bounds);
		*bounds = NULL;
		*aligned = false;
		return false;
	}
	*nbounds = n;
	*complete_to = to;
	return true;
}

/* The volume's capacity in bytes (its "volume" object's capacity_bytes). */
bool
gr_agent_volume_capacity(uint64 *capacity, char *err, size_t errlen)
{
	Jsonb	   *jb = gr_agent_call(gr_agent_request("volume", NULL), err, errlen);
	JsonbValue *volume;
	uint64		bytes;

	if (jb == NULL || !gr_json_ok(jb))
		return false;
	volume = gr_json_key(&jb->root, "volume");
	if (volume == NULL || volume->type != jbvBinary)
	{
		snprintf(err, errlen, "reply to \"volume\" lacks the volume object");
		return false;
	}
	/* at most what a bigint holds: the SQL functions return it */
	if (!gr_json_required(gr_json_count(volume->val.binary.data, "capacity_bytes",
										PG_INT64_MAX, &bytes, "volume", err, errlen),
						  "volume", "capacity_bytes", err, errlen))
		return false;
	if (bytes == 0)
	{
		snprintf(err, errlen, "reply to \"volume\": capacity_bytes is zero");
		return false;
	}
	*capacity = bytes;
	return true;
}
