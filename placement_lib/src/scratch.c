/* Scratch memory for the create path without malloc (README "Signals, fork and
 * descriptors").
 *
 * open() is async-signal-safe, so a signal handler may create a file while
 * the thread it interrupted is inside malloc: libiez must not call malloc on
 * that path. Its buffers (the lookup's row, the layout text, a directory's
 * default) come from a per-thread stack of memory instead: one anonymous
 * mapping made by the thread's first create (mmap is a plain system call),
 * handed out and given back last-in first-out, and unmapped when the thread
 * exits. A handler that interrupts libiez itself finds iez_busy set and makes
 * the plain call, so the stack is never entered twice at once. The mapping
 * is reserved, not committed: a thread pays for the pages it touched.
 */
#include "iez.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#define SCRATCH_BYTES (256u * 1024u) /* the largest create needs about 100 KiB (README) */

static IEZ_TLS unsigned char *base;
static IEZ_TLS size_t used;
static pthread_key_t key;
static int have_key;

static void release(void *p)
{
    if (p)
        munmap(p, SCRATCH_BYTES);
    base = NULL; /* the destructor runs on the exiting thread itself */
    used = 0;
}

/* At load, before any thread or handler can create: pthread_key_create is not async-signal-safe. */
__attribute__((constructor)) static void scratch_init(void)
{
    have_key = pthread_key_create(&key, release) == 0;
}

void *iez_tmp_alloc(size_t n)
{
    if (!base) {
        void *p = mmap(NULL, SCRATCH_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        base = p;
        used = 0;
        if (have_key)
            pthread_setspecific(key, p); /* a store into the thread's own slots for the first keys */
    }
    size_t need = (n + 15u) & ~(size_t)15u;
    if (n == 0 || need < n || need > SCRATCH_BYTES - used)
        return NULL; /* the callers treat it as any failure: the plain call */
    void *p = base + used;
    used += need;
    return p;
}

void iez_tmp_free(void *p)
{
    unsigned char *q = p;
    if (q && base && q >= base && q < base + SCRATCH_BYTES)
        used = (size_t)(q - base); /* last in, first out: what came after p goes too */
}
