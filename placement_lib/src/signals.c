/* The application's signal handlers, each installed behind a trampoline of libiez's, so that the library
 * knows when a create comes from inside one (README "Signals, fork and descriptors"): a handler may have
 * interrupted its thread inside malloc or free, and MariaDB Connector/C allocates with glibc's malloc, so
 * a create there makes no direct MariaDB lookup (db.c; a map or SQLite still answers, they allocate
 * nothing of glibc's).
 *
 * sigaction (and signal, bsd_signal, ssignal, sysv_signal, sigset, siginterrupt, which glibc implements
 * with its internal sigaction, out of an interposer's reach) keeps the application's handler in a table
 * indexed by the signal, one per form (plain, SA_SIGINFO), and gives the kernel the trampoline of the same
 * form instead, with the application's mask and flags untouched. The trampoline counts the handler as
 * running on its thread, calls the application's handler with the same arguments and uncounts it: it
 * touches neither errno nor the mask, so SA_RESETHAND, SA_NODEFER, SA_RESTART and SA_ONSTACK behave as
 * they do plainly. Every old action reported (sigaction's out-parameter, signal's result) names the
 * application's handler where the kernel holds a trampoline: libiez is invisible. SIG_DFL, SIG_IGN and
 * other values below a page are given to the kernel as they are.
 *
 * A handler that leaves by longjmp or siglongjmp does not uncount itself. So each running handler is
 * recorded with its trampoline's frame address (and the alternate stack it runs on, if any), and a create
 * looks (iez_signal_running, on the caller's stack): a handler whose frame is no longer below the caller's
 * stack pointer on the same stack has been left, and is forgotten. The error is only ever conservative: a
 * create after a longjmp out of a handler, made deeper on the stack than that handler ran, is still taken
 * for one (no direct MariaDB lookup, an error with the plain call) until the thread's stack comes back
 * above it. */
#include "real.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

/* The application's handlers behind the trampolines, by signal: written before the trampoline is given
 * to the kernel, never cleared, read by the trampolines with one atomic load (async-signal-safe). Each
 * form has its table: a signal delivered to the old trampoline while sigaction changes the form calls a
 * handler of its own form. */
static void (*plain_handlers[NSIG])(int);
static void (*info_handlers[NSIG])(int, siginfo_t *, void *);
/* Signals siginterrupt(sig, 1) was last called for (bit sig - 1): signal() then installs without
 * SA_RESTART, as glibc's does. */
static uint64_t interrupting[(NSIG + 63) / 64];

/* Handlers recorded per thread; deeper ones are counted, and taken as running while the innermost recorded
 * one runs. Few and small: every thread's TLS holds them (README "At most 4 KiB of the caller's stack"). */
#define MAX_NESTED 2

static IEZ_TLS struct {
    int depth; /* handlers running on this thread (or left by a longjmp, until a create sees it) */
    struct {
        uintptr_t frame;  /* the trampoline's frame */
        uintptr_t alt_lo; /* the bottom of the alternate stack it runs on (the frame is above); 0: none */
    } at[MAX_NESTED];
} running;

static int enter(uintptr_t frame)
{
    int my = running.depth;
    running.depth = my + 1; /* first: a handler nested from here on records itself above */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (my < MAX_NESTED) {
        int saved = errno;
        stack_t ss;
        uintptr_t lo = 0;
        if (sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK))
            lo = (uintptr_t)ss.ss_sp;
        errno = saved;
        running.at[my].frame = frame;
        running.at[my].alt_lo = lo;
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    return my;
}

static void leave(int my)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    running.depth = my;
}

static void trampoline(int sig)
{
    int my = enter((uintptr_t)__builtin_frame_address(0));
    void (*fn)(int) = __atomic_load_n(&plain_handlers[sig], __ATOMIC_ACQUIRE);
    if (fn)
        fn(sig);
    leave(my);
}

static void trampoline_info(int sig, siginfo_t *info, void *context)
{
    int my = enter((uintptr_t)__builtin_frame_address(0));
    void (*fn)(int, siginfo_t *, void *) = __atomic_load_n(&info_handlers[sig], __ATOMIC_ACQUIRE);
    if (fn)
        fn(sig, info, context);
    leave(my);
}

int iez_signal_running(void)
{
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    for (;;) {
        int d = running.depth;
        if (d <= 0)
            return 0;
        /* the innermost recorded one: the handlers nested deeper ran inside it */
        int top = d < MAX_NESTED ? d : MAX_NESTED;
        uintptr_t frame = running.at[top - 1].frame, lo = running.at[top - 1].alt_lo;
        if (sp < frame && sp >= lo)
            return 1;
        /* left by a longjmp, with every handler nested in it: this thread's stack is back above it, or off
         * its alternate stack (a handler that interrupts here restores the depth before it returns) */
        __atomic_compare_exchange_n(&running.depth, &d, top - 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
}

/* A handler the kernel would call (SIG_DFL, SIG_IGN, SIG_HOLD and SIG_ERR are not). */
static int callable(uintptr_t h)
{
    return h >= 4096 && h != (uintptr_t)SIG_ERR;
}

/* Signals glibc's sigaction accepts: not 0, not past NSIG, not its own two (cancellation, setxid). */
static int ours_to_wrap(int sig)
{
    return sig > 0 && sig < NSIG && !(sig >= __SIGRTMIN && sig < SIGRTMIN);
}

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static int wrapped_sigaction(sigaction_fn real, int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!ours_to_wrap(sig))
        return real(sig, act, old); /* EINVAL, as plainly */
    void (*prev_plain)(int) = __atomic_load_n(&plain_handlers[sig], __ATOMIC_ACQUIRE);
    void (*prev_info)(int, siginfo_t *, void *) = __atomic_load_n(&info_handlers[sig], __ATOMIC_ACQUIRE);
    struct sigaction mine;
    /* a vfork() child shares the tables with its parent: its handlers go to the kernel as they are */
    if (act && iez_is_owner()) {
        if (act->sa_flags & SA_SIGINFO) {
            if (callable((uintptr_t)act->sa_sigaction)) {
                mine = *act;
                __atomic_store_n(&info_handlers[sig], act->sa_sigaction, __ATOMIC_RELEASE);
                mine.sa_sigaction = trampoline_info;
                act = &mine;
            }
        } else if (callable((uintptr_t)act->sa_handler)) {
            mine = *act;
            __atomic_store_n(&plain_handlers[sig], act->sa_handler, __ATOMIC_RELEASE);
            mine.sa_handler = trampoline;
            act = &mine;
        }
    }
    int rc = real(sig, act, old);
    if (rc == 0 && old) {
        if (old->sa_handler == trampoline)
            old->sa_handler = prev_plain;
        else if (old->sa_sigaction == trampoline_info)
            old->sa_sigaction = prev_info;
    }
    return rc;
}

IEZ_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return wrapped_sigaction(REAL(sigaction), sig, act, old);
}

IEZ_EXPORT int __sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return wrapped_sigaction(REAL(__sigaction), sig, act, old);
}

/* glibc's siginterrupt changes the kernel's flags behind the trampoline (which stays): what signal()
 * installs next is what is kept here. */
IEZ_EXPORT int siginterrupt(int sig, int interrupt)
{
    int rc = REAL(siginterrupt)(sig, interrupt);
    if (rc == 0 && sig > 0 && sig < NSIG) {
        uint64_t bit = (uint64_t)1 << ((sig - 1) % 64);
        if (interrupt)
            __atomic_or_fetch(&interrupting[(sig - 1) / 64], bit, __ATOMIC_RELAXED);
        else
            __atomic_and_fetch(&interrupting[(sig - 1) / 64], ~bit, __ATOMIC_RELAXED);
    }
    return rc;
}

/* signal, bsd_signal, ssignal and sysv_signal, as glibc makes them, through the sigaction above. */
static sighandler_t install(int sig, sighandler_t handler, int bsd)
{
    if (handler == SIG_ERR || !ours_to_wrap(sig)) {
        errno = EINVAL;
        return SIG_ERR;
    }
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    if (bsd) {
        sigaddset(&act.sa_mask, sig);
        uint64_t bit = (uint64_t)1 << ((sig - 1) % 64);
        act.sa_flags = __atomic_load_n(&interrupting[(sig - 1) / 64], __ATOMIC_RELAXED) & bit ? 0 : SA_RESTART;
    } else {
        act.sa_flags = (SA_ONESHOT | SA_NOMASK | SA_INTERRUPT) & ~SA_RESTART;
    }
    if (wrapped_sigaction(REAL(sigaction), sig, &act, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}

IEZ_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    return install(sig, handler, 1);
}

IEZ_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler)
{
    return install(sig, handler, 1);
}

IEZ_EXPORT sighandler_t ssignal(int sig, sighandler_t handler)
{
    return install(sig, handler, 1);
}

IEZ_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler)
{
    return install(sig, handler, 0);
}

IEZ_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler)
{
    return install(sig, handler, 0);
}

/* System V's sigset, as glibc's: SIG_HOLD blocks the signal, anything else installs it (no flags, empty
 * mask) and unblocks it; SIG_HOLD is the result when the signal was blocked. */
IEZ_EXPORT sighandler_t sigset(int sig, sighandler_t disp)
{
    sigset_t set, oset;
    struct sigaction act, old;
    sigemptyset(&set);
    if (sigaddset(&set, sig) < 0)
        return SIG_ERR;
    if (disp == SIG_HOLD) {
        if (sigprocmask(SIG_BLOCK, &set, &oset) < 0)
            return SIG_ERR;
        if (sigismember(&oset, sig))
            return SIG_HOLD;
        if (wrapped_sigaction(REAL(sigaction), sig, NULL, &old) < 0)
            return SIG_ERR;
        return old.sa_handler;
    }
    memset(&act, 0, sizeof act);
    act.sa_handler = disp;
    sigemptyset(&act.sa_mask);
    act.sa_flags = 0;
    if (wrapped_sigaction(REAL(sigaction), sig, &act, &old) < 0)
        return SIG_ERR;
    if (sigprocmask(SIG_UNBLOCK, &set, &oset) < 0)
        return SIG_ERR;
    return sigismember(&oset, sig) ? SIG_HOLD : old.sa_handler;
}
