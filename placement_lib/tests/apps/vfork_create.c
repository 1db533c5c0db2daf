/* A vfork() child makes the process's first create (issue 14, reproduction 7).
 *
 *   vfork_create DIR
 *
 * The vfork() child creates DIR/child with open(O_CREAT|O_WRONLY) and leaves
 * with _exit; the parent (which shares its memory until then) waits for it,
 * then creates DIR/parent.0, DIR/parent.1 and DIR/parent.2 the same way. It
 * prints one line per create ("<name> ok" or "<name> <error>") and the
 * longest of the parent's creates in whole seconds ("slowest parent create
 * <S> s"). Exit status 0 when every create succeeded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: vfork_create DIR\n");
        return 2;
    }
    static char child_path[4096];
    snprintf(child_path, sizeof child_path, "%s/child", argv[1]);
    pid_t pid = vfork();
    if (pid == 0) {
        int fd = open(child_path, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0)
            close(fd);
        _exit(fd >= 0 ? 0 : 1);
    }
    int status, failed = 0;
    waitpid(pid, &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    printf("child %s\n", failed ? "failed" : "ok");
    double slowest = 0;
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/parent.%d", argv[1], i);
        double t = app_now();
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        t = app_now() - t;
        if (t > slowest)
            slowest = t;
        printf("parent.%d %s\n", i, fd >= 0 ? "ok" : strerror(errno));
        failed |= fd < 0;
        if (fd >= 0)
            close(fd);
    }
    printf("slowest parent create %d s\n", (int)slowest);
    return failed;
}
