/* A fork-based launcher, as mpirun starts ranks: N processes at once, each a
 * fresh exec of this program (so each loads libiez and maps IEZ_MAP by
 * itself), each creating one file. For tests/maps and benchmarks/map_scale.py.
 *
 *   rank_launch N DIR        start N ranks; rank i creates DIR/rank.<i>
 *
 * The launcher forks every rank before it waits for any, then prints
 * "ranks N ok K seconds S" (K ranks created their file and exited 0; S the
 * wall time from the first fork to the last exit). Exit status 0 when K == N.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static int rank(const char *dir, const char *id)
{
    char path[4096], text[64];
    snprintf(path, sizeof path, "%s/rank.%s", dir, id);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "rank %s: open %s: %s\n", id, path, strerror(errno));
        return 1;
    }
    int n = snprintf(text, sizeof text, "rank %s\n", id);
    int bad = write(fd, text, (size_t)n) != n;
    return close(fd) != 0 || bad;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "rank"))
        return rank(argv[3], argv[2]);
    if (argc != 3) {
        fprintf(stderr, "usage: rank_launch N DIR\n");
        return 2;
    }
    int n = atoi(argv[1]);
    double t0 = app_now();
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            char id[16];
            snprintf(id, sizeof id, "%d", i);
            execl("/proc/self/exe", argv[0], "rank", id, argv[2], (char *)NULL);
            _exit(127);
        }
    }
    int ok = 0, status;
    while (wait(&status) > 0)
        ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("ranks %d ok %d seconds %.6f\n", n, ok, app_now() - t0);
    return ok == n ? 0 : 1;
}
