/*-------------------------------------------------------------------------
 *
 * gr_number.c
 *	  Checks of the numbers in the storage agent's JSON replies (see
 *	  gr_number.h).
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <string.h>

#include "gr_number.h"

GrNumberStatus
gr_parse_count(const char *text, uint64_t max, uint64_t *out)
{
	const char *p = text;
	bool		negative = false;
	bool		digits = false;
	uint64_t	value = 0;
	GrNumberStatus status = GR_NUMBER_OK;

	if (*p == '-')
	{
		negative = true;
		p++;
	}
	for (; isdigit((unsigned char) *p); p++)
	{
		unsigned	d = (unsigned) (*p - '0');

		digits = true;
		if (value > (max - d) / 10)
			status = GR_NUMBER_TOO_LARGE;	/* keep scanning: it may be malformed */
		else
			value = value * 10 + d;
	}
	if (!digits)
		return GR_NUMBER_NOT_A_NUMBER;
	if (*p == '.')
	{
		bool		fraction_digits = false;

		for (p++; isdigit((unsigned char) *p); p++)
		{
			fraction_digits = true;
			if (*p != '0' && status == GR_NUMBER_OK)
				status = GR_NUMBER_FRACTIONAL;
		}
		if (!fraction_digits)
			return GR_NUMBER_NOT_A_NUMBER;
	}
	if (*p != '\0')
		return GR_NUMBER_NOT_A_NUMBER;
	/* "-0" and "-0.000" are zero; anything else below zero is negative */
	if (negative && (value != 0 || status != GR_NUMBER_OK))
		return GR_NUMBER_NEGATIVE;
	if (status != GR_NUMBER_OK)
		return status;
	*out = value;
	return GR_NUMBER_OK;
}

const char *
gr_number_problem(GrNumberStatus status)
{
	switch (status)
	{
		case GR_NUMBER_OK:
			return "is valid";
		case GR_NUMBER_NOT_A_NUMBER:
			return "is not a number";
		case GR_NUMBER_NEGATIVE:
			return "is negative";
		case GR_NUMBER_FRACTIONAL:
			return "is not a whole number";
		case GR_NUMBER_TOO_LARGE:
			return "is too large";
	}
	return "is invalid";
}

bool
gr_json_number_token_ok(const char *token)
{
	const char *e;
	long		exponent = 0;
	const char *p;

	if (strlen(token) > GR_NUMBER_TOKEN_MAX)
		return false;
	e = strpbrk(token, "eE");
	if (e == NULL)
		return true;
	p = e + 1;
	if (*p == '+' || *p == '-')
		p++;
	for (; isdigit((unsigned char) *p); p++)
	{
		exponent = exponent * 10 + (*p - '0');
		if (exponent > GR_NUMBER_EXPONENT_MAX)
			return false;
	}
	return true;
}
