/*-------------------------------------------------------------------------
 *
 * gr_number.h
 *	  Checks of the numbers in the storage agent's JSON replies.
 *
 * Pure logic, no PostgreSQL dependency (test/unit/test_number.c); the glue
 * that reads jsonb is gr_agent.c.  The agent is another process, possibly
 * buggy or hostile: a count or a byte offset it sends must be an exact
 * integer in range (never a value rounded through a double, wrapped by a
 * cast, or truncated from a fraction), and a number token must be one that
 * PostgreSQL's numeric input accepts without raising an ERROR.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GR_NUMBER_H
#define GR_NUMBER_H

#include <stdbool.h>
#include <stdint.h>

typedef enum GrNumberStatus
{
	GR_NUMBER_OK,
	GR_NUMBER_NOT_A_NUMBER,		/* not decimal digits */
	GR_NUMBER_NEGATIVE,
	GR_NUMBER_FRACTIONAL,
	GR_NUMBER_TOO_LARGE
} GrNumberStatus;

/*
 * Parse a plain decimal ("-"? digits ("." digits)?, as numeric_out prints a
 * finite numeric) into an integer in [0, max].  "12.000" is 12; "-0" is 0.
 */
extern GrNumberStatus gr_parse_count(const char *text, uint64_t max, uint64_t *out);

/* What is wrong with a number, for an error message ("is negative"). */
extern const char *gr_number_problem(GrNumberStatus status);

/*
 * Whether a JSON number token (as the lexer hands it over, e.g. "1.5e-3")
 * is short and of small enough exponent to be turned into a numeric without
 * an ERROR: PostgreSQL's numeric input refuses exponents beyond 1000 and
 * more than 131072 digits before the point.
 */
extern bool gr_json_number_token_ok(const char *token);

/* Longest number token accepted in an agent's reply. */
#define GR_NUMBER_TOKEN_MAX		64

/* Largest exponent accepted in a number token. */
#define GR_NUMBER_EXPONENT_MAX	400

#endif							/* GR_NUMBER_H */
