/* tests/test.h: the whole unit-test harness. A test file defines functions with TEST(name)
 * and a main() that calls RUN(name) for each, then returns test_report(). CHECK records a
 * failure with file:line and carries on; REQUIRE returns from the test on failure. */
#ifndef DSPARK_TEST_H
#define DSPARK_TEST_H

#include <math.h>
#include <stdio.h>

static int test_failed, test_checks, test_current_failed;

#define TEST(name) static void name(void)
#define RUN(name)                                                                                  \
    do {                                                                                           \
        test_current_failed = 0;                                                                   \
        name();                                                                                    \
        printf("%s %s\n", test_current_failed ? "FAIL" : "ok  ", #name);                           \
        test_failed += test_current_failed;                                                        \
    } while (0)
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(c)) {                                                                                \
            printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                         \
            test_current_failed = 1;                                                               \
        }                                                                                          \
    } while (0)
#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        int require_ok_ = !!(c); /* evaluated once: c may have side effects */                     \
        test_checks++;                                                                             \
        if (!require_ok_) {                                                                        \
            printf("  %s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #c);                       \
            test_current_failed = 1;                                                               \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define CHECK_NEAR(a, b, tol) CHECK(fabs((double)(a) - (double)(b)) <= (tol))
/* Tests that need data from outside the repo (../shared) call SKIP with the reason. */
#define SKIP(why)                                                                                  \
    do {                                                                                           \
        printf("  skipped: %s\n", why);                                                            \
        return;                                                                                    \
    } while (0)

static inline int test_report(void) {
    printf("%d checks, %d failed tests\n", test_checks, test_failed);
    return test_failed ? 1 : 0;
}

#endif
