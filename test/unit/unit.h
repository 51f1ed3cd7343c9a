/*
 * A minimal harness for the C unit tests of the extension's pure logic:
 * expect() counts checks, unit_report() prints "N passed, M failed" (the
 * line CI reads) and gives the exit code.
 */
#ifndef GR_UNIT_H
#define GR_UNIT_H

#include <stdio.h>

static int	unit_passed;
static int	unit_failed;

static void
expect(int ok, const char *what)
{
	if (ok)
		unit_passed++;
	else
	{
		unit_failed++;
		printf("FAILED: %s\n", what);
	}
}

static int
unit_report(void)
{
	printf("%d passed, %d failed\n", unit_passed, unit_failed);
	return unit_failed == 0 ? 0 : 1;
}

#endif							/* GR_UNIT_H */
