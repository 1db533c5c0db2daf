/* Memory for libiez's own work that never comes from the application's stack
 * or, on the create path, from malloc (README "Signals, fork and descriptors").
 *
 * Programs size their thread stacks tightly (16 KiB) and run signal handlers
 * on small alternate stacks (8 KiB); a preload library must not notice. So the
 * interposers do almost nothing on the caller's stack: whatever needs room
 * (a path, a layout, a DB lookup, a trace row, a report) runs on a stack of
 * libiez's own, with its buffers from a scratch area beside it. Each thread
 * has one mapping, made by its first call that needs it (mmap is a plain
 * system call, so this is async-signal-safe) and unmapped at thread exit:
 *
 *     [guard page][library stack, grows down][scratch, handed out last in first out]
 *
 * The mapping is reserved, not committed: a thread pays for the pages it
 * touched. open() is async-signal-safe, so a handler may create a file while
 * its thread is inside malloc: scratch is why the create path never calls it.
 *
 * A signal handler that interrupts libiez on its own stack runs on that stack
 * too and simply goes deeper; one that runs on a sigaltstack finds the library
 * stack taken by the call it interrupted, and gets the plain call.
 */
#include "iez.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#define GUARD_BYTES (64u * 1024u)    /* no page size has more: an overflow faults, never writes elsewhere */
#define STACK_BYTES (512u * 1024u)   /* a SQLite or MariaDB lookup, a trace spill, dlsym: ~100 KiB at most */
#define SCRATCH_BYTES (256u * 1024u) /* the largest create needs about 100 KiB (README) */
#define REGION_BYTES (GUARD_BYTES + STACK_BYTES + SCRATCH_BYTES)

/* The module's state: per thread (TLS, which a signal handler reaches without a lock), and the key
 * whose destructor gives a thread's mapping back. */
static IEZ_TLS struct {
    unsigned char *base;      /* this thread's mapping, NULL until its first need */
    size_t used;              /* scratch handed out */
    int depth;                /* calls running on the library stack (x86-64) */
} here;
static struct {
    pthread_key_t key;
    int have_key;
} keyed;

static void release(void *p)
{
    if (p)
        munmap(p, REGION_BYTES);
    here.base = NULL; /* the destructor runs on the exiting thread itself, never on the library stack */
    here.used = 0;
}

/* At load, before any thread or handler can need it: pthread_key_create is not async-signal-safe. */
__attribute__((constructor)) static void scratch_init(void)
{
    keyed.have_key = pthread_key_create(&keyed.key, release) == 0;
}

/* errno is the application's: a failure here only means the plain call. */
static int map_region(void)
{
    int saved = errno;
    unsigned char *p = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p != MAP_FAILED && mprotect(p, GUARD_BYTES, PROT_NONE) != 0) {
        munmap(p, REGION_BYTES);
        p = MAP_FAILED;
    }
    errno = saved;
    if (p == MAP_FAILED)
        return -1;
    here.base = p;
    here.used = 0;
    if (keyed.have_key)
        pthread_setspecific(keyed.key, p); /* a store into the thread's own slots for the first keys */
    return 0;
}

void *iez_tmp_alloc(size_t n)
{
    if (!here.base && map_region() != 0)
        return NULL;
    size_t need = (n + 15u) & ~(size_t)15u;
    if (n == 0 || need < n || need > SCRATCH_BYTES - here.used)
        return NULL; /* the callers treat it as any failure: the plain call */
    void *p = here.base + GUARD_BYTES + STACK_BYTES + here.used;
    here.used += need;
    return p;
}

void iez_tmp_free(void *p)
{
    unsigned char *q = p, *scratch = here.base ? here.base + GUARD_BYTES + STACK_BYTES : NULL;
    if (q && scratch && q >= scratch && q < scratch + SCRATCH_BYTES)
        here.used = (size_t)(q - scratch); /* last in, first out: what came after p goes too */
}

/* Calls fn(arg) with the stack pointer at top (16-byte aligned); the caller's stack holds one frame. The
 * frame pointer keeps the caller's stack pointer, so debuggers and unwinders walk back across. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define IEZ_SWITCH 1
void iez_switch_call(void (*fn)(void *), void *arg, void *top);
__asm__(".text\n"
        ".globl iez_switch_call\n"
        ".hidden iez_switch_call\n"
        ".type iez_switch_call, @function\n"
        "iez_switch_call:\n"
        ".cfi_startproc\n"
        "    pushq %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "    movq %rsp, %rbp\n"
        ".cfi_def_cfa_register %rbp\n"
        "    movq %rdx, %rsp\n"
        "    movq %rdi, %rax\n"
        "    movq %rsi, %rdi\n"
        "    callq *%rax\n"
        "    movq %rbp, %rsp\n"
        "    popq %rbp\n"
        ".cfi_def_cfa %rsp, 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size iez_switch_call, .-iez_switch_call\n");
#endif

int iez_on_stack(void (*fn)(void *), void *arg)
{
#ifdef IEZ_SWITCH
    unsigned char *sp = __builtin_frame_address(0);
    if (here.depth) {
        /* a handler that interrupted libiez on its stack: deeper on the same stack */
        if (sp > here.base + GUARD_BYTES && sp <= here.base + GUARD_BYTES + STACK_BYTES) {
            fn(arg);
            return 0;
        }
        return -1; /* the library stack holds the call this handler interrupted */
    }
    if (!here.base && map_region() != 0)
        return -1;
    here.depth++;
    iez_switch_call(fn, arg, here.base + GUARD_BYTES + STACK_BYTES);
    here.depth--;
#else
    /* other architectures, and the sanitizer build (ASan keeps its own idea of each thread's stack) */
    fn(arg);
#endif
    return 0;
}
