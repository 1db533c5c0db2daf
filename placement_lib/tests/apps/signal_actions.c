/* What a program sees of its signal handlers, which libiez installs behind a trampoline of its own
 * (src/signals.c): everything printed must be the same plainly and under libiez.
 *
 *   signal_actions DIR ROUNDS
 *
 * Installs handlers with sigaction (plain and SA_SIGINFO forms, SA_RESTART, SA_NODEFER, SA_RESETHAND,
 * SA_ONSTACK, a mask), signal, bsd_signal, ssignal, sysv_signal and sigset, and prints what sigaction(sig,
 * NULL, &old), the old-action out-parameters and signal's results report, what the handlers saw (their
 * arguments, the mask they ran with, errno), whether a read interrupted by a handler was restarted, and
 * what a second signal did after SA_RESETHAND (in a child). Then, ROUNDS times: a handler creates
 * DIR/in.<k> and leaves by siglongjmp (on the thread's stack, and on a sigaltstack), after which the program
 * creates DIR/out.<k> outside any handler; and a handler that returns creates DIR/ret.<k>. A library that
 * still believed itself in a handler after the siglongjmp would treat out.<k> as a handler's create. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

/* siginterrupt is deprecated, not gone: programs still call it */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
/* glibc defines bsd_signal (signal's other name) but its header no longer declares it */
extern sighandler_t bsd_signal(int sig, sighandler_t handler);

static const char *dir;
static char path[4096];

static volatile sig_atomic_t seen_sig, seen_code, seen_ctx, seen_blocked_usr2, seen_blocked_self, nested;
static volatile sig_atomic_t calls;

static void record_mask(int sig)
{
    sigset_t cur;
    sigprocmask(SIG_BLOCK, NULL, &cur);
    seen_blocked_usr2 = sigismember(&cur, SIGUSR2);
    seen_blocked_self = sigismember(&cur, sig);
}

static void plain_handler(int sig)
{
    calls++;
    seen_sig = sig;
    record_mask(sig);
    errno = 42; /* a handler's errno is what the program sees after it, plainly */
}

static void info_handler(int sig, siginfo_t *info, void *ctx)
{
    calls++;
    seen_sig = info->si_signo;
    seen_code = info->si_code;
    seen_ctx = ctx != NULL;
    record_mask(sig);
    if (!nested) { /* SA_NODEFER: the same signal again, from inside */
        nested = 1;
        raise(sig);
    }
}

static void other_handler(int sig)
{
    (void)sig;
    calls++;
}

static const char *name_of(void *h)
{
    if (h == (void *)SIG_DFL)
        return "SIG_DFL";
    if (h == (void *)SIG_IGN)
        return "SIG_IGN";
    if (h == (void *)SIG_HOLD)
        return "SIG_HOLD";
    if (h == (void *)SIG_ERR)
        return "SIG_ERR";
    if (h == (void *)plain_handler)
        return "plain_handler";
    if (h == (void *)info_handler)
        return "info_handler";
    if (h == (void *)other_handler)
        return "other_handler";
    return "unknown";
}

static void show(const char *label, const struct sigaction *sa)
{
    void *h = sa->sa_flags & SA_SIGINFO ? (void *)sa->sa_sigaction : (void *)sa->sa_handler;
    printf("%s: %s flags %#x mask", label, name_of(h), (unsigned)sa->sa_flags);
    for (int s = 1; s < 32; s++)
        if (sigismember(&sa->sa_mask, s))
            printf(" %d", s);
    printf("\n");
}

static void now(const char *label, int sig)
{
    struct sigaction cur;
    int rc = sigaction(sig, NULL, &cur);
    if (rc != 0) {
        printf("%s: sigaction failed: %s\n", label, strerror(errno));
        return;
    }
    show(label, &cur);
}

static void result(const char *label, sighandler_t h)
{
    int err = errno;
    printf("%s: %s%s%s\n", label, name_of((void *)h), h == SIG_ERR ? " " : "", h == SIG_ERR ? strerror(err) : "");
}

/* ---- a read interrupted by a handler that writes what it reads ------------------------------------ */
static int wake[2];

static void waker(int sig)
{
    (void)sig;
    char c = 'x';
    if (write(wake[1], &c, 1) != 1)
        _exit(3);
}

static void interrupted_read(int restart)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = waker;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGALRM, &sa, NULL);
    if (pipe(wake) != 0)
        exit(2);
    struct itimerval once = { { 0, 0 }, { 0, 20000 } };
    setitimer(ITIMER_REAL, &once, NULL);
    char c;
    errno = 0;
    ssize_t n = read(wake[0], &c, 1);
    printf("read %s SA_RESTART: %zd %s\n", restart ? "with" : "without", n, n < 0 ? strerror(errno) : "");
    close(wake[0]);
    close(wake[1]);
}

/* ---- creates from handlers that leave by siglongjmp, and after them ------------------------------- */
static sigjmp_buf back;
static int round_k;

static void create(const char *prefix, int k)
{
    snprintf(path, sizeof path, "%s/%s.%d", dir, prefix, k); /* outside the handler: prepared here */
    int rc = app_create(path, "data\n", 5);
    if (rc != APP_OK)
        printf("create %s.%d failed (%d)\n", prefix, k, rc);
}

static char in_path[4096];

static void jumping_handler(int sig)
{
    (void)sig;
    int fd = open(in_path, O_CREAT | O_WRONLY | O_TRUNC, 0644); /* async-signal-safe: open and close */
    if (fd >= 0)
        close(fd);
    siglongjmp(back, 1);
}

static void returning_handler(int sig)
{
    (void)sig;
    int fd = open(in_path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd >= 0)
        close(fd);
}

/* raise from deeper than where the program creates afterwards, as a handler deep in a computation */
static __attribute__((noinline)) void deep_raise(int sig, int depth)
{
    volatile char pad[2048];
    pad[0] = (char)depth;
    if (depth > 0)
        deep_raise(sig, depth - 1);
    else
        raise(sig);
    (void)pad[0];
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: signal_actions DIR ROUNDS\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    dir = argv[1];
    int rounds = atoi(argv[2]);
    struct sigaction sa, old;

    now("initial SIGUSR1", SIGUSR1);

    /* sigaction: plain form, SA_RESTART, a mask */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = plain_handler;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    sa.sa_flags = SA_RESTART;
    memset(&old, 0, sizeof old);
    printf("install plain: %d\n", sigaction(SIGUSR1, &sa, &old));
    show("old of plain", &old);
    now("after plain", SIGUSR1);
    errno = 7;
    raise(SIGUSR1);
    printf("plain raised: calls %d sig %d usr2 blocked %d self blocked %d errno %d\n", (int)calls, (int)seen_sig,
           (int)seen_blocked_usr2, (int)seen_blocked_self, errno);

    /* SA_SIGINFO form, SA_NODEFER | SA_ONSTACK, replacing the plain one */
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = info_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    printf("install info: %d\n", sigaction(SIGUSR1, &sa, &old));
    show("old of info", &old);
    now("after info", SIGUSR1);
    calls = 0;
    raise(SIGUSR1);
    printf("info raised: calls %d signo %d code %d ctx %d usr2 blocked %d self blocked %d\n", (int)calls,
           (int)seen_sig, (int)seen_code, (int)seen_ctx, (int)seen_blocked_usr2, (int)seen_blocked_self);

    /* SIG_IGN, SIG_DFL pass through; the old one is the application's */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGUSR1, &sa, &old);
    show("old of SIG_IGN", &old);
    now("after SIG_IGN", SIGUSR1);
    raise(SIGUSR1);
    sa.sa_handler = SIG_DFL;
    sigaction(SIGUSR1, &sa, &old);
    show("old of SIG_DFL", &old);
    now("after SIG_DFL", SIGUSR1);

    /* signal and its relatives */
    result("signal first", signal(SIGUSR2, other_handler));
    result("signal again", signal(SIGUSR2, plain_handler));
    now("after signal", SIGUSR2);
    printf("siginterrupt: %d\n", siginterrupt(SIGUSR2, 1));
    now("after siginterrupt", SIGUSR2);
    result("signal after siginterrupt", signal(SIGUSR2, other_handler));
    now("after signal after siginterrupt", SIGUSR2);
    printf("siginterrupt off: %d\n", siginterrupt(SIGUSR2, 0));
    result("bsd_signal", bsd_signal(SIGUSR2, plain_handler));
    now("after bsd_signal", SIGUSR2);
    result("ssignal", ssignal(SIGUSR2, other_handler));
    result("sysv_signal", sysv_signal(SIGUSR2, plain_handler));
    now("after sysv_signal", SIGUSR2);
    calls = 0;
    raise(SIGUSR2);
    now("after sysv_signal's signal (one-shot)", SIGUSR2);
    result("sigset handler", sigset(SIGUSR2, other_handler));
    now("after sigset", SIGUSR2);
    result("sigset hold", sigset(SIGUSR2, SIG_HOLD));
    result("sigset hold again", sigset(SIGUSR2, SIG_HOLD));
    result("sigset back", sigset(SIGUSR2, plain_handler));
    result("signal to SIG_DFL", signal(SIGUSR2, SIG_DFL));
    printf("calls %d\n", (int)calls);

    /* what glibc refuses */
    int rc;
    errno = 0;
    rc = sigaction(0, &sa, NULL);
    printf("sigaction 0: %d %s\n", rc, strerror(errno));
    errno = 0;
    rc = sigaction(65, NULL, &old);
    printf("sigaction 65: %d %s\n", rc, strerror(errno));
    errno = 0;
    rc = sigaction(32, NULL, &old);
    printf("sigaction 32: %d %s\n", rc, strerror(errno));
    errno = 0;
    sa.sa_handler = plain_handler;
    rc = sigaction(SIGKILL, &sa, NULL);
    printf("sigaction SIGKILL: %d %s\n", rc, strerror(errno));
    errno = 0;
    result("signal SIGSTOP", signal(SIGSTOP, plain_handler));
    errno = 0;
    result("signal 0", signal(0, plain_handler));
    errno = 0;
    result("signal SIG_ERR", signal(SIGUSR2, SIG_ERR));

    /* SA_RESTART kept, or not */
    interrupted_read(1);
    interrupted_read(0);

    /* SA_RESETHAND: the second signal takes the default action (in a child) */
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = plain_handler;
        sa.sa_flags = SA_RESETHAND;
        sigaction(SIGUSR2, &sa, NULL);
        raise(SIGUSR2);
        now("child after one-shot", SIGUSR2);
        raise(SIGUSR2);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("one-shot child: %s %d\n", WIFSIGNALED(status) ? "signalled" : "exited",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));

    /* creates in handlers that leave by siglongjmp, then outside any handler */
    static char alt[1 << 16];
    stack_t ss = { .ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0 };
    sigaltstack(&ss, NULL);
    int done = 0;
    for (round_k = 0; round_k < rounds; round_k++) {
        int onstack = round_k % 2;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = jumping_handler;
        sa.sa_flags = onstack ? SA_ONSTACK : 0;
        sigaction(SIGUSR1, &sa, NULL);
        snprintf(in_path, sizeof in_path, "%s/in.%d", dir, round_k);
        if (sigsetjmp(back, 1) == 0)
            deep_raise(SIGUSR1, 4);
        else
            done++;
        create("out", round_k);
        sa.sa_handler = returning_handler;
        sigaction(SIGUSR1, &sa, NULL);
        snprintf(in_path, sizeof in_path, "%s/ret.%d", dir, round_k);
        raise(SIGUSR1);
        create("after", round_k);
    }
    printf("jumped %d of %d\n", done, rounds);
    return 0;
}
