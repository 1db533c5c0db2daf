/* Creates files from a parent and its forked children, for the placement tests.
 *
 *   fork_create DIR NCHILDREN
 *
 * The parent creates DIR/parent.dat, then forks NCHILDREN children; child i
 * creates DIR/child.<i> with open(O_CREAT), writes "child <i>\n" and leaves
 * through exit() when i is even and _exit() when i is odd (both must run
 * libiez's exit work). After the children the parent creates
 * DIR/parent.after. Each process prints "<role> <pid>" (role "parent" or
 * "child.<i>") on stdout. The exit status is 0 when every create, write and
 * child succeeded, 1 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static int create(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return app_create(path, text, strlen(text)) == APP_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fork_create DIR NCHILDREN\n");
        return 2;
    }
    const char *dir = argv[1];
    int n = atoi(argv[2]);
    int failed = 0;
    printf("parent %d\n", (int)getpid());
    fflush(stdout);
    if (create(dir, "parent.dat", "parent\n") != 0)
        failed = 1;
    pid_t *pids = calloc((size_t)(n > 0 ? n : 1), sizeof *pids);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "fork: %s\n", strerror(errno));
            failed = 1;
            break;
        }
        if (pid == 0) {
            char name[64], text[64];
            snprintf(name, sizeof name, "child.%d", i);
            snprintf(text, sizeof text, "child %d\n", i);
            printf("child.%d %d\n", i, (int)getpid());
            fflush(stdout);
            int rc = create(dir, name, text) == 0 ? 0 : 1;
            if (i % 2)
                _exit(rc);
            exit(rc);
        }
        pids[i] = pid;
    }
    for (int i = 0; i < n; i++) {
        int status;
        if (pids[i] <= 0)
            continue;
        if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d failed\n", i);
            failed = 1;
        }
    }
    free(pids);
    if (create(dir, "parent.after", "after\n") != 0)
        failed = 1;
    return failed;
}
