/* Creates and writes files on small stacks (issue 27, reproduction 2).
 *
 *   small_stacks DIR            run: 16 KiB threads and an 8 KiB sigaltstack handler
 *   small_stacks DIR measure    print the stack bytes each operation touched
 *
 * Run: 8 threads with 16 KiB stacks (PTHREAD_STACK_MIN) each create files with
 * open, creat, openat and fopen (then fputs, fprintf, fputc, fwrite, fclose),
 * writing 100 bytes to each; then a SIGUSR1 handler on an 8 KiB sigaltstack
 * creates 4 files with open, write, close (async-signal-safe calls only); last
 * a 16 KiB thread creates a file and calls exit(0), so exit's handlers run on
 * it. Prints "threads 8 files 32 handler 4" first; exits 0 when everything
 * succeeded, 1 (with the failures on stderr) otherwise. Without the library
 * all of this fits: under it, it must too.
 *
 * Measure: each operation runs once on a fresh 1 MiB stack filled with a
 * pattern (a thread's: pthread_attr_setstack; a handler's: sigaltstack), and
 * the lowest byte it changed gives the bytes it used, TLS and thread
 * descriptor included (glibc puts them at the top of a thread's stack). The
 * exit case runs in a child, on a shared mapping the parent scans after the
 * child is gone. One line per operation: "<name> <bytes>".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define SMALL (16 * 1024)
#define ALT (8 * 1024)
#define BIG (1024 * 1024)
#define PATTERN 0xA5

static const char *dir;
static int dirfd_;
static char payload[101];

static int fail(const char *what, const char *name)
{
    fprintf(stderr, "%s %s: %s\n", what, name, strerror(errno));
    return 1;
}

static int write_close(int fd, const char *name)
{
    if (fd < 0)
        return fail("create", name);
    if (write(fd, payload, 100) != 100)
        return fail("write", name);
    return close(fd) ? fail("close", name) : 0;
}

/* The creates one thread makes: files <tag>.{o,c,a,f}. Small frames: a path of 256 bytes. */
static int creates(const char *tag)
{
    char path[256];
    int bad = 0;
    snprintf(path, sizeof path, "%s/%s.o", dir, tag);
    bad |= write_close(open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644), path);
    snprintf(path, sizeof path, "%s/%s.c", dir, tag);
    bad |= write_close(creat(path, 0644), path);
    snprintf(path, sizeof path, "%s.a", tag);
    bad |= write_close(openat(dirfd_, path, O_CREAT | O_WRONLY | O_EXCL, 0600), path);
    snprintf(path, sizeof path, "%s/%s.f", dir, tag);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return fail("fopen", path);
    fputs("0123456789", fp);                     /* 10 */
    fprintf(fp, "%s-%060d", "abcdefghi", 7);     /* 70 */
    fputc('x', fp);                              /* 1 */
    fwrite(payload, 1, 19, fp);                  /* 19 */
    return bad | (fclose(fp) ? fail("fclose", path) : 0);
}

static void *worker(void *arg)
{
    char tag[32];
    snprintf(tag, sizeof tag, "t%ld", (long)arg);
    return (void *)(long)creates(tag);
}

static volatile sig_atomic_t handled, handler_failed;

static volatile sig_atomic_t handler_idle; /* measure: the handler's own cost, without a create */

static void on_usr1(int sig)
{
    (void)sig;
    if (handler_idle)
        return;
    char path[256];
    int n = handled;
    size_t len = strlen(dir);
    memcpy(path, dir, len);
    memcpy(path + len, "/s.0", 5);
    path[len + 3] = (char)('0' + n);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || write(fd, payload, 100) != 100 || close(fd) != 0)
        handler_failed = 1;
    handled = n + 1;
}

static void *exit_worker(void *arg)
{
    (void)arg;
    char path[256];
    snprintf(path, sizeof path, "%s/exit.dat", dir);
    if (write_close(open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644), path))
        _exit(1);
    exit(0);
}

static int start(pthread_t *t, void *(*fn)(void *), void *arg, void *stack, size_t size)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    int rc = stack ? pthread_attr_setstack(&attr, stack, size) : pthread_attr_setstacksize(&attr, size);
    if (!rc)
        rc = pthread_create(t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc)
        fprintf(stderr, "pthread_create: %s\n", strerror(rc));
    return rc;
}

static int on_altstack(void *stack, size_t size)
{
    stack_t ss = { .ss_sp = stack, .ss_size = size, .ss_flags = 0 };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return sigaltstack(&ss, NULL) || sigaction(SIGUSR1, &sa, NULL);
}

static int run(void)
{
    long failed = app_threads(8, worker, SMALL);
    if (failed < 0)
        return 1;
    int bad = failed != 0;
    static char alt[ALT] __attribute__((aligned(16)));
    if (on_altstack(alt, sizeof alt))
        return fail("sigaltstack", "");
    for (int i = 0; i < 4; i++)
        raise(SIGUSR1);
    bad |= handler_failed || handled != 4;
    printf("threads 8 files 32 handler %d\n", (int)handled);
    fflush(stdout);
    pthread_t e;
    if (start(&e, exit_worker, NULL, NULL, SMALL))
        return 1;
    if (bad)
        _exit(1);
    pthread_join(e, NULL); /* exit_worker's exit(0) ends the process */
    return 1;
}

/* Bytes of [base, base + size) below the top that differ from the pattern. */
static size_t used(const unsigned char *base, size_t size)
{
    size_t i = 0;
    while (i < size && base[i] == PATTERN)
        i++;
    return size - i;
}

static unsigned char *fresh(void)
{
    unsigned char *p = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        exit(2);
    memset(p, PATTERN, BIG);
    return p;
}

static void *measure_one(void *arg)
{
    const char *tag = arg;
    return (void *)(long)(tag ? creates(tag) : 0);
}

static size_t thread_use(const char *tag)
{
    unsigned char *s = fresh();
    pthread_t t;
    void *r = NULL;
    if (start(&t, measure_one, (void *)tag, s, BIG) || pthread_join(t, &r) || r)
        exit(1);
    size_t n = used(s, BIG);
    munmap(s, BIG);
    return n;
}

static int measure(void)
{
    printf("thread-nothing %zu\n", thread_use(NULL));
    printf("thread-creates %zu\n", thread_use("m1"));
    printf("thread-creates-again %zu\n", thread_use("m2")); /* every first-time cost already paid */
    for (int idle = 1; idle >= 0; idle--) {
        unsigned char *s = fresh();
        if (on_altstack(s, BIG))
            return fail("sigaltstack", "");
        handler_idle = idle;
        raise(SIGUSR1);
        printf("%s %zu\n", idle ? "handler-nothing" : "handler-create", used(s, BIG));
        stack_t off = { .ss_flags = SS_DISABLE };
        sigaltstack(&off, NULL);
        munmap(s, BIG);
    }
    unsigned char *s = fresh();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        pthread_t t;
        if (start(&t, exit_worker, NULL, s, BIG))
            _exit(1);
        pthread_join(t, NULL);
        _exit(1);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
        return fail("exit child", "");
    printf("thread-create-and-exit %zu\n", used(s, BIG));
    return handler_failed;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: small_stacks DIR [measure]\n");
        return 2;
    }
    dir = argv[1];
    memset(payload, 'p', 100);
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY);
    if (dirfd_ < 0)
        return fail("open", dir);
    return argc > 2 && !strcmp(argv[2], "measure") ? measure() : run();
}
