/*
 * check_run.h — the one way a unit-test binary runs its check suite: every
 * test in `s` (forked, CK_NORMAL output: the "NN%: Checks: N, Failures: F,
 * Errors: E" line scripts/run-unit-tests reads), then EXIT_FAILURE if any
 * test failed or errored, EXIT_SUCCESS otherwise. Takes and frees the suite.
 */
#ifndef BF_TEST_CHECK_RUN_H
#define BF_TEST_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* BF_TEST_CHECK_RUN_H */
