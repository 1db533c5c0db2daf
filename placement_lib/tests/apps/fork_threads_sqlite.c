/* fork() from a threaded program whose other thread works in SQLite (issue 14, reproduction 1).
 *
 *   fork_threads_sqlite DIR NCHILDREN SQLITE_DB
 *
 * A second thread opens SQLITE_DB (outside DIR), writes and reads it and closes
 * it, over and over, through the process's own libsqlite3 (dlopen), so that
 * SQLite's global mutexes are often held when the main thread forks. The main
 * thread forks NCHILDREN children; child i creates DIR/c.<i> with
 * open(O_CREAT|O_WRONLY|O_TRUNC), writes "child <i>\n" and leaves with _exit.
 * The parent waits at most 30 s for all of them, kills any left and prints
 * "children <N> hung <H> failed <F>". Exit status 0 when none hung or failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

typedef struct sqlite3 sqlite3;
static int (*open_v2)(const char *, sqlite3 **, int, const char *);
static int (*exec_sql)(sqlite3 *, const char *, int (*)(void *, int, char **, char **), void *, char **);
static int (*close_db)(sqlite3 *);
static const char *dbpath;
static volatile int stop;

static void *sqlite_worker(void *arg)
{
    (void)arg;
    while (!stop) {
        sqlite3 *db = NULL;
        if (open_v2(dbpath, &db, 0x2 | 0x4 /* READWRITE | CREATE */, NULL) == 0) {
            exec_sql(db, "CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES(randomblob(64));"
                         "SELECT count(*), max(length(x)) FROM t;", NULL, NULL, NULL);
        }
        close_db(db);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: fork_threads_sqlite DIR NCHILDREN SQLITE_DB\n");
        return 2;
    }
    const char *dir = argv[1];
    int n = atoi(argv[2]);
    dbpath = argv[3];
    void *lib = dlopen("libsqlite3.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "dlopen libsqlite3.so.0: %s\n", dlerror());
        return 2;
    }
    open_v2 = (int (*)(const char *, sqlite3 **, int, const char *))dlsym(lib, "sqlite3_open_v2");
    exec_sql = (int (*)(sqlite3 *, const char *, int (*)(void *, int, char **, char **), void *, char **))dlsym(
        lib, "sqlite3_exec");
    close_db = (int (*)(sqlite3 *))dlsym(lib, "sqlite3_close");
    pthread_t worker;
    pthread_create(&worker, NULL, sqlite_worker, NULL);
    struct timespec pause = { 0, 20 * 1000 * 1000 };
    nanosleep(&pause, NULL);

    pid_t *pids = calloc((size_t)n, sizeof *pids);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            char path[4096], text[64];
            snprintf(path, sizeof path, "%s/c.%d", dir, i);
            int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
            if (fd < 0)
                _exit(3);
            int len = snprintf(text, sizeof text, "child %d\n", i);
            int ok = write(fd, text, (size_t)len) == len;
            close(fd);
            _exit(ok ? 0 : 4);
        }
        pids[i] = pid;
    }
    int left = n, failed = 0;
    double deadline = app_now() + 30.0;
    while (left > 0 && app_now() < deadline) {
        for (int i = 0; i < n; i++) {
            int status;
            if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                    failed++;
                pids[i] = 0;
                left--;
            }
        }
        struct timespec tick = { 0, 2 * 1000 * 1000 };
        nanosleep(&tick, NULL);
    }
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
    stop = 1;
    pthread_join(worker, NULL);
    printf("children %d hung %d failed %d\n", n, left, failed);
    return left || failed ? 1 : 0;
}
