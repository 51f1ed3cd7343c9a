/*
 * Unit tests of the checks of the storage agent's numbers (src/gr_number.c):
 * counts and byte offsets must be exact whole numbers in range, and number
 * tokens must be ones PostgreSQL's numeric input takes without an ERROR.
 * Built and run by scripts/check.sh; prints "N passed, M failed".
 */
#include <stdio.h>
#include <string.h>

#include "../../src/gr_number.h"
#include "unit.h"

static GrNumberStatus
parse(const char *text, uint64_t max, uint64_t *out)
{
	*out = 12345;
	return gr_parse_count(text, max, out);
}

int
main(void)
{
	uint64_t	v;

	expect(parse("0", 10, &v) == GR_NUMBER_OK && v == 0, "0 is a count");
	expect(parse("42", 100, &v) == GR_NUMBER_OK && v == 42, "42 is a count");
	expect(parse("12.000", 100, &v) == GR_NUMBER_OK && v == 12, "12.000 is 12");
	expect(parse("-0", 100, &v) == GR_NUMBER_OK && v == 0, "-0 is 0");
	expect(parse("100", 100, &v) == GR_NUMBER_OK && v == 100, "the maximum itself");
	expect(parse("101", 100, &v) == GR_NUMBER_TOO_LARGE && v == 12345,
		   "one above the maximum is too large, and nothing is stored");
	expect(parse("9223372036854775807", INT64_MAX, &v) == GR_NUMBER_OK &&
		   v == (uint64_t) INT64_MAX, "INT64_MAX exactly, no rounding through a double");
	expect(parse("9007199254740993", INT64_MAX, &v) == GR_NUMBER_OK &&
		   v == 9007199254740993ULL, "2^53 + 1 exactly");
	expect(parse("9223372036854775808", INT64_MAX, &v) == GR_NUMBER_TOO_LARGE,
		   "INT64_MAX + 1 is too large");
	expect(parse("18446744073709551615", UINT64_MAX, &v) == GR_NUMBER_OK &&
		   v == UINT64_MAX, "UINT64_MAX with that maximum");
	expect(parse("18446744073709551616", UINT64_MAX, &v) == GR_NUMBER_TOO_LARGE,
		   "2^64 does not wrap to 0");
	expect(parse("1000000000000000000000000000000", INT32_MAX, &v) == GR_NUMBER_TOO_LARGE,
		   "1e30 is too large for an int");
	expect(parse("2147483648", INT32_MAX, &v) == GR_NUMBER_TOO_LARGE,
		   "INT_MAX + 1 is too large for an int");
	expect(parse("-1", 100, &v) == GR_NUMBER_NEGATIVE && v == 12345, "-1 is negative");
	expect(parse("-0.5", 100, &v) == GR_NUMBER_NEGATIVE, "-0.5 is negative");
	expect(parse("-99999999999999999999999", 100, &v) == GR_NUMBER_NEGATIVE,
		   "a huge negative number is negative, not too large");
	expect(parse("2.5", 100, &v) == GR_NUMBER_FRACTIONAL && v == 12345, "2.5 is fractional");
	expect(parse("0.0000001", 100, &v) == GR_NUMBER_FRACTIONAL, "a tiny fraction too");
	expect(parse("NaN", 100, &v) == GR_NUMBER_NOT_A_NUMBER, "NaN is not a number");
	expect(parse("Infinity", 100, &v) == GR_NUMBER_NOT_A_NUMBER, "Infinity is not a number");
	expect(parse("", 100, &v) == GR_NUMBER_NOT_A_NUMBER, "empty is not a number");
	expect(parse("-", 100, &v) == GR_NUMBER_NOT_A_NUMBER, "a lone sign is not a number");
	expect(parse("1.", 100, &v) == GR_NUMBER_NOT_A_NUMBER, "1. is not a number");
	expect(parse("1e3", 10000, &v) == GR_NUMBER_NOT_A_NUMBER,
		   "an exponent is not plain decimal (numeric_out never prints one)");
	expect(parse("12abc", 100, &v) == GR_NUMBER_NOT_A_NUMBER, "trailing text is refused");
	expect(parse("999999999999999999999x", 100, &v) == GR_NUMBER_NOT_A_NUMBER,
		   "trailing text after an overflow is not a number");
	expect(strcmp(gr_number_problem(GR_NUMBER_FRACTIONAL), "is not a whole number") == 0,
		   "the problem reads as a phrase");

	expect(gr_json_number_token_ok("0"), "0 is a fine token");
	expect(gr_json_number_token_ok("-1.5e-3"), "-1.5e-3 is a fine token");
	expect(gr_json_number_token_ok("1e400"), "1e400 is within numeric's exponents");
	expect(!gr_json_number_token_ok("1e401"), "1e401 is refused");
	expect(!gr_json_number_token_ok("1E+1001"), "1E+1001 (numeric_in would ERROR) is refused");
	expect(!gr_json_number_token_ok("1e-99999999999999999999"),
		   "a huge negative exponent is refused without overflowing the parse");
	{
		char		longtoken[GR_NUMBER_TOKEN_MAX + 2];

		memset(longtoken, '9', sizeof(longtoken) - 1);
		longtoken[sizeof(longtoken) - 1] = '\0';
		expect(!gr_json_number_token_ok(longtoken), "a 65-digit token is refused");
		longtoken[GR_NUMBER_TOKEN_MAX] = '\0';
		expect(gr_json_number_token_ok(longtoken), "a 64-digit token is accepted");
	}
	return unit_report();
}
