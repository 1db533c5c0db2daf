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

static const char *dir;
static int proc_no, per;
static pthread_barrier_t start;

static int create(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "open %s: %s\n", path, strerror(errno));
        return -1;
    }
    int ok = write(fd, "x", 1) == 1;
    if (close(fd) != 0 || !ok) {
        fprintf(stderr, "write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void *worker(void *arg)
{
    long i = (long)arg;
    char name[64];
    pthread_barrier_wait(&start);
    for (int j = 0; j < per; j++) {
        snprintf(name, sizeof name, "p%d.t%ld.%d", proc_no, i, j);
        if (create(name) != 0)
            return (void *)1;
    }
    return NULL;
}

static int run(int threads)
{
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (long i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        failed |= rc != NULL;
    }
    char name[64];
    snprintf(name, sizeof name, "p%d.last", proc_no);
    failed |= create(name) != 0;
    free(t);
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
