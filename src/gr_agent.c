/*-------------------------------------------------------------------------
 *
 * gr_agent.c
 *	  Client of the storage agent's control socket.
 *
 * The protocol is one JSON object per line each way (docs/storage-agent.md).
 * Replies are checked with the non-throwing JSON parser before they are
 * turned into jsonb, so a confused agent produces an error message here,
 * never an ERROR that would take the scheduler down.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

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

/* Run a request and return its reply as jsonb, or NULL with err set. */
static Jsonb *
gr_agent_call(const char *request, char *err, size_t errlen)
{
	char	   *reply = gr_agent_roundtrip(request, err, errlen);
	JsonLexContext *lex;
	JsonbValue *ok;
	Jsonb	   *jb;

	if (reply == NULL)
		return NULL;

	lex = makeJsonLexContextCstringLen(reply, strlen(reply), PG_UTF8, true);
	if (pg_parse_json(lex, &nullSemAction) != JSON_SUCCESS)
	{
		snprintf(err, errlen, "malformed reply from the storage agent: %.80s", reply);
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

static bool
gr_json_number(JsonbContainer *container, const char *key, double *out)
{
	JsonbValue *v = gr_json_key(container, key);

	if (v == NULL || v->type != jbvNumeric)
		return false;
	*out = DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
											  NumericGetDatum(v->val.numeric)));
	return true;
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
gr_agent_volume_info(GrVolumeInfo *info, char *err, size_t errlen)
{
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
		double		reads;
		double		writes;

		if (ledger != NULL && ledger->type == jbvBinary &&
			gr_json_number(ledger->val.binary.data, "reads", &reads) &&
			gr_json_number(ledger->val.binary.data, "writes", &writes))
			info->ios = reads + writes;
		if (ledger != NULL && ledger->type == jbvBinary)
			(void) gr_json_number(ledger->val.binary.data, "spin_ups", &info->spin_ups);
	}

	profile = gr_json_key(volume->val.binary.data, "profile");
	if (profile == NULL || profile->type != jbvBinary ||
		!gr_json_number(profile->val.binary.data, "spin_up_s", &info->spin_up_s) ||
		!gr_json_number(profile->val.binary.data, "break_even_s", &info->break_even_s))
	{
		snprintf(err, errlen, "reply to \"volume\" lacks profile.spin_up_s or profile.break_even_s");
		return false;
	}
	if (!gr_json_number(profile->val.binary.data, "spin_down_s", &info->spin_down_s))
		info->spin_down_s = 0;
	return true;
}

bool
gr_agent_wake(double *ready_in_s, char *err, size_t errlen)
{
	Jsonb	   *jb = gr_agent_call(gr_agent_request("wake", NULL), err, errlen);

	if (jb == NULL || !gr_json_ok(jb))
		return false;
	if (!gr_json_number(&jb->root, "ready_in_s", ready_in_s))
		*ready_in_s = 0;
	return true;
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
	double		n;
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
	if (gr_json_number(&jb->root, "extents", &n))
		*recorded = (int) n;
	return true;
}

bool
gr_agent_set_temperature(const GrExtent *extents, int count, const char *temperature,
						 int *ranges, char *err, size_t errlen)
{
	StringInfoData extra;
	Jsonb	   *jb;
	double		n;
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
	if (jb == NULL)
		return false;
	if (!gr_json_ok(jb))
	{
		/* The agent's own words: a layout without temperatures, too many ranges. */
		snprintf(err, errlen, "the storage agent refused set_temperature");
		gr_json_string(&jb->root, "error", err, errlen);
		return false;
	}
	if (gr_json_number(&jb->root, "ranges", &n))
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
	if (!gr_json_number(&jb->root, "ready_in_s", ready_in_s))
		*ready_in_s = 0;
	return true;
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
	double		to;
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
		list->type != jbvBinary || !JsonContainerIsArray(list->val.binary.data) ||
		!gr_json_number(&jb->root, "complete_to", &to))
	{
		snprintf(err, errlen, "reply to \"boundaries\" lacks aligned, boundaries or complete_to");
		return false;
	}
	*aligned = flag->val.boolean;
	capacity = Max(JsonContainerSize(list->val.binary.data), 1);
	*bounds = palloc(sizeof(uint64) * capacity);

	/* Every entry a number inside the range, ascending; anything else voids it. */
	it = JsonbIteratorInit(list->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		double		b;

		if (tok != WJB_ELEM)
			continue;
		if (v.type != jbvNumeric || n >= capacity)
			break;
		b = DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
											   NumericGetDatum(v.val.numeric)));
		if (!(b > (double) prev) || b >= (double) (offset + len))
			break;
		prev = (uint64) b;
		(*bounds)[n++] = prev;
	}
	if (n != JsonContainerSize(list->val.binary.data) || to < (double) offset ||
		to > (double) (offset + len))
	{
		snprintf(err, errlen, "reply to \"boundaries\" has a boundary out of order or outside the range");
		pfree(*bounds);
		*bounds = NULL;
		*aligned = false;
		return false;
	}
	*nbounds = n;
	*complete_to = (uint64) to;
	return true;
}

/* The volume's capacity in bytes (its "volume" object's capacity_bytes). */
bool
gr_agent_volume_capacity(uint64 *capacity, char *err, size_t errlen)
{
	Jsonb	   *jb = gr_agent_call(gr_agent_request("volume", NULL), err, errlen);
	JsonbValue *volume;
	double		bytes;

	if (jb == NULL || !gr_json_ok(jb))
		return false;
	volume = gr_json_key(&jb->root, "volume");
	if (volume == NULL || volume->type != jbvBinary ||
		!gr_json_number(volume->val.binary.data, "capacity_bytes", &bytes) ||
		!(bytes > 0))
	{
		snprintf(err, errlen, "reply to \"volume\" lacks capacity_bytes");
		return false;
	}
	*capacity = (uint64) bytes;
	return true;
}
