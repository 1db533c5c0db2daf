/* paced_create: creates files one at a time, when told. Reads paths from stdin, one a line; for each,
 * creates it (open O_CREAT|O_WRONLY|O_TRUNC 0644, writes "x\n", close) and prints "PATH ok" or
 * "PATH failed" on stdout, flushed, before reading the next line: the test decides what happens
 * between two creates of the same process (tests/placement_lib/test_mariadb_cutoff.py). Exit 0 at
 * end of input when every create succeeded, else 1. */
#include "common.h"

int main(void)
{
    char line[4096];
    int failed = 0;
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0])
            continue;
        int rc = app_create(line, "x\n", 2);
        failed |= rc != APP_OK;
        printf("%s %s\n", line, rc == APP_OK ? "ok" : "failed");
        fflush(stdout);
    }
    return failed;
}
