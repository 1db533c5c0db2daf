/* Many processes and threads creating at once (issue 31 item 7: SQLite lookups lost under concurrency).
 *
 *   burst_create DIR PROCS THREADS PER
 *
 * Forks PROCS processes, which start together (they wait for the end of a pipe the parent closes
 * once all are forked). Each starts THREADS threads that wait on one barrier, then each thread
 * creates PER files DIR/p<k>.t<i>.<j> one after the other (open O_CREAT|O_WRONLY|O_TRUNC 0644,
 * one byte, close). When its threads are done, each process creates DIR/p<k>.last alone. The
 * parent prints "created N" and exits 0 when every create of every process succeeded; failures
 * are printed on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static const char *dir;
static int proc_no, per;

static int create(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = app_create(path, "x", 1);
    if (rc == APP_WRITE || rc == APP_CLOSE)
        fprintf(stderr, "write %s: %s\n", path, strerror(errno));
    return rc == APP_OK ? 0 : -1;
}

static void *worker(void *arg)
{
    long i = (long)arg;
    char name[64];
    pthread_barrier_wait(app_barrier());
    for (int j = 0; j < per; j++) {
        snprintf(name, sizeof name, "p%d.t%ld.%d", proc_no, i, j);
        if (create(name) != 0)
            return (void *)1;
    }
    return NULL;
}

static int run(int threads)
{
    long bad = app_threads(threads, worker, 0);
    if (bad < 0)
        return 1;
    int failed = bad != 0;
    char name[64];
    snprintf(name, sizeof name, "p%d.last", proc_no);
    failed |= create(name) != 0;
    return failed;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: burst_create DIR PROCS THREADS PER\n");
        return 2;
    }
    dir = argv[1];
    int procs = atoi(argv[2]), threads = atoi(argv[3]);
    per = atoi(argv[4]);
    int go[2];
    if (pipe(go) != 0)
        return 2;
    for (int k = 0; k < procs; k++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            char c;
            close(go[1]);
            while (read(go[0], &c, 1) > 0)
                ;
            proc_no = k;
            _exit(run(threads));
        }
    }
    close(go[1]); /* every child reads its end now: they start together */
    int failed = 0, status;
    while (wait(&status) > 0)
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (failed)
        return 1;
    printf("created %d\n", procs * (threads * per + 1));
    return 0;
}
