/* Tracing mode (the paper's miniRecorder): per file, the bytes this process
 * wrote, the size it left, its layout on Lustre and its directory's default
 * layout. A write costs one array load and one atomic add: the descriptor
 * table maps each descriptor (and each of its copies) to its file's record.
 *
 * Memory is bounded: records live in chunks that are never freed (a write
 * racing with a close may touch a record being reused, never freed memory),
 * found through a growable open-addressing hash table, and at most
 * IEZ_TRACE_MAX_FILES of them stay in memory. Past that, the rows of the files
 * no descriptor holds are appended to the process's trace file early and
 * their records reused; a file opened again later gets a second row, which
 * iez trace parse merges like rows of two processes (README "Trace CSV"). */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

struct record {
    uint64_t bytes;           /* atomic; first, so iez_count_write can add without knowing the rest */
    uint64_t hash;
    char *path;               /* NULL: a free record; set and cleared under the lock */
    struct record *free_next;
    int64_t size;             /* -1: unknown */
    double open_time;
    uint64_t stripe_size;
    int stripe_count;
    int closing;              /* atomic: fclose/freopen between detach and iez_trace_size_by_path */
    unsigned mark;            /* spill epoch in which a descriptor was seen holding it */
    unsigned char opened_here;/* 0 for records inherited across fork() */
    unsigned char lustre;
    unsigned char pinned;     /* held by an MPI file handle: never written early */
    unsigned char dir_owned;  /* dir_layout is this record's own copy, not an interned text */
    char *layout;             /* atomic; Lustre: the file's layout, version 2; NULL: unknown */
    const char *dir_layout;   /* atomic; canonical template of the directory's default; NULL: none */
    FILE *stream;             /* atomic; the stdio stream fopen/freopen opened it as, while stream_fd is bound */
    int stream_fd;
};

#define CHUNK 512             /* records per chunk */
#define MAX_CHUNKS 16384      /* 8,388,608 records at most, open files and MPI handles included */
#define DEFAULT_MAX_FILES 65536
#define MAX_MAX_FILES (1u << 22)
#define MAX_INTERNED 64       /* distinct directory defaults shared between records */

/* The module's state. Out of it: what other modules read on their hot paths (iez.h: the descriptor
 * table, its length and the stream marks), and `holding`, which is per thread. */
static struct {
    pthread_mutex_t lock;
    struct record *chunks[MAX_CHUNKS]; /* readers without the lock see a prefix of filled chunks */
    size_t nchunks, chunk_used;
    struct record *free_list;
    size_t live;                       /* records holding a path */
    struct record **slots;             /* hash table: linear probing, at most half full */
    size_t nslots, nused;
    size_t max_files;                  /* IEZ_TRACE_MAX_FILES, read on first use */
    size_t spill_at;                   /* live records that start the next early write */
    unsigned spill_epoch;
    int finished;                      /* the trace was written at exit: no more early rows */
    int spill_failed;                  /* early rows were cut short: the trace file is not whole */
    const char *interned[MAX_INTERNED];
    size_t ninterned;
    int exiting;                       /* exit() runs: stdio flushes its buffers after the trace is written */
    int fd_high;                       /* atomic: every descriptor ever bound is below it */
} trace = { .lock = PTHREAD_MUTEX_INITIALIZER };
static IEZ_TLS int holding; /* this thread holds trace.lock: a signal handler's exit must not wait for it */

void **iez_fd_records;        /* fd -> struct record *, atomics (iez.h) */
size_t iez_fd_records_len;
struct iez_stream_mark *iez_stream_marks; /* fd -> the stream seen writing it (trace_stdio.c) */
#define fds ((struct record **)iez_fd_records)
#define nfds iez_fd_records_len
IEZ_TLS int iez_in_mpi_write;

/* holding is set before the lock is taken and cleared after it is released, so
 * that a handler interrupting either step never waits on its own thread. */
static void take(void)
{
    holding = 1;
    pthread_mutex_lock(&trace.lock);
}

static void give(void)
{
    pthread_mutex_unlock(&trace.lock);
    holding = 0;
}

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* IEZ_TRACE_MAX_FILES: a whole number from 1 to 4,194,304; anything else is the default, said once. */
static size_t read_max_files(void)
{
    const char *v = getenv("IEZ_TRACE_MAX_FILES");
    if (!v || !*v)
        return DEFAULT_MAX_FILES;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || v[0] < '0' || v[0] > '9' || n < 1 || n > MAX_MAX_FILES) {
        iez_debug("IEZ_TRACE_MAX_FILES=%s is not a whole number from 1 to %u: %u files are kept", v, MAX_MAX_FILES,
                  DEFAULT_MAX_FILES);
        return DEFAULT_MAX_FILES;
    }
    return (size_t)n;
}

/* Runs in exit() before the destructors that write the trace, and never in _exit() or exec. */
static void note_exiting(void)
{
    trace.exiting = 1;
}

/* The descriptor table and the limit, once; caller holds lock. */
static void init_locked(void)
{
    if (!trace.max_files) {
        int saved = errno;
        trace.max_files = read_max_files();
        trace.spill_at = trace.max_files;
        atexit(note_exiting);
        errno = saved;
    }
    if (fds)
        return;
    /* As long as the hard limit, not the soft one: a program may raise its soft limit after its first
     * traced open (Python's resource module, a job launcher), and its descriptors above the old soft
     * limit were not traced. The table is calloc'd, so its pages cost memory only where descriptors
     * are (a 1,048,576 hard limit reserves 24 MiB of address space, not of memory). */
    struct rlimit rl;
    size_t n = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        n = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (1u << 20) ? (1u << 20)
            : rl.rlim_max > n                                      ? (size_t)rl.rlim_max
                                                                   : n;
    /* descriptors above 2^20, or above a hard limit raised later, are not traced, only sized at exit */
    void **table = calloc(n, sizeof *table);
    struct iez_stream_mark *marks = table ? calloc(n, sizeof *marks) : NULL;
    if (marks) {
        iez_stream_marks = marks; /* before the table: a traced descriptor always has its mark */
        iez_fd_records_len = n;
        __atomic_store_n(&iez_fd_records, table, __ATOMIC_RELEASE);
    } else {
        free(table);
    }
}

/* ---- the hash table (caller holds lock) ------------------------------------ */

static int grow_locked(void)
{
    size_t n = trace.nslots ? trace.nslots * 2 : 1024;
    struct record **table = calloc(n, sizeof *table);
    if (!table)
        return -1;
    for (size_t i = 0; i < trace.nslots; i++) {
        struct record *r = trace.slots[i];
        if (!r)
            continue;
        size_t j = r->hash & (n - 1);
        while (table[j])
            j = (j + 1) & (n - 1);
        table[j] = r;
    }
    free(trace.slots);
    trace.slots = table;
    trace.nslots = n;
    return 0;
}

static struct record *find_locked(const char *abspath, uint64_t h)
{
    if (!trace.nslots)
        return NULL;
    for (size_t i = h & (trace.nslots - 1); trace.slots[i]; i = (i + 1) & (trace.nslots - 1))
        if (trace.slots[i]->hash == h && !strcmp(trace.slots[i]->path, abspath))
            return trace.slots[i];
    return NULL;
}

static int insert_locked(struct record *r)
{
    if ((trace.nused + 1) * 2 > trace.nslots && grow_locked())
        return -1;
    size_t i = r->hash & (trace.nslots - 1);
    while (trace.slots[i])
        i = (i + 1) & (trace.nslots - 1);
    trace.slots[i] = r;
    trace.nused++;
    return 0;
}

/* Backward-shift deletion: the probe chains stay unbroken without tombstones. */
static void remove_locked(struct record *r)
{
    size_t mask = trace.nslots - 1, i = r->hash & mask;
    while (trace.slots[i] != r)
        i = (i + 1) & mask;
    for (size_t j = (i + 1) & mask; trace.slots[j]; j = (j + 1) & mask) {
        size_t home = trace.slots[j]->hash & mask;
        /* slots[j] may move to i when i lies cyclically in [home, j) */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            trace.slots[i] = trace.slots[j];
            i = j;
        }
    }
    trace.slots[i] = NULL;
    trace.nused--;
}

/* ---- records ----------------------------------------------------------------- */

static struct record *new_record_locked(void)
{
    struct record *r = trace.free_list;
    if (r) {
        trace.free_list = r->free_next;
        return r;
    }
    if (!trace.nchunks || trace.chunk_used == CHUNK) {
        if (trace.nchunks == MAX_CHUNKS)
            return NULL;
        struct record *c = calloc(CHUNK, sizeof *c);
        if (!c)
            return NULL;
        trace.chunks[trace.nchunks] = c;
        trace.chunk_used = 0;
        __atomic_store_n(&trace.nchunks, trace.nchunks + 1, __ATOMIC_RELEASE);
    }
    return &trace.chunks[trace.nchunks - 1][trace.chunk_used++];
}

/* Forgets r (its row is written or not wanted) and keeps the memory for the next file. */
static void release_locked(struct record *r)
{
    remove_locked(r);
    free(__atomic_exchange_n(&r->path, NULL, __ATOMIC_ACQ_REL)); /* readers without the lock see NULL first */
    free(__atomic_exchange_n(&r->layout, NULL, __ATOMIC_ACQ_REL));
    const char *dir = __atomic_exchange_n(&r->dir_layout, NULL, __ATOMIC_ACQ_REL);
    if (r->dir_owned)
        free((char *)dir);
    r->dir_owned = 0;
    __atomic_store_n(&r->stream, NULL, __ATOMIC_RELEASE);
    r->pinned = 0;
    r->opened_here = 0;
    __atomic_store_n(&r->bytes, 0, __ATOMIC_RELAXED);
    r->free_next = trace.free_list;
    trace.free_list = r;
    trace.live--;
}

/* Every record holding a path; readers without the lock see whole chunks only. */
#define FOR_EACH_RECORD(r)                                                                     \
    for (size_t c_ = 0, n_ = __atomic_load_n(&trace.nchunks, __ATOMIC_ACQUIRE); c_ < n_; c_++) \
        for (struct record *r = trace.chunks[c_]; r < trace.chunks[c_] + CHUNK; r++)             \
            if (__atomic_load_n(&r->path, __ATOMIC_ACQUIRE))

static void spill_locked(void);

/* Record for abspath, created on first sight; caller holds lock. */
static struct record *get_locked(const char *abspath, int *is_new)
{
    uint64_t h = hash(abspath);
    struct record *r = find_locked(abspath, h);
    if (r) {
        *is_new = 0;
        return r;
    }
    if (trace.live >= trace.spill_at && !trace.finished && iez_is_owner())
        spill_locked(); /* a vfork() child shares this memory and writes nothing early */
    char *path = strdup(abspath);
    r = path ? new_record_locked() : NULL;
    if (!r) {
        free(path);
        return NULL;
    }
    r->hash = h;
    r->size = -1;
    r->open_time = iez_now();
    r->stripe_count = iez_cfg()->default_stripe_count;
    r->stripe_size = 0;
    r->lustre = 0;
    r->closing = 0;
    r->mark = 0;
    __atomic_store_n(&r->path, path, __ATOMIC_RELEASE);
    if (insert_locked(r)) {
        __atomic_store_n(&r->path, NULL, __ATOMIC_RELEASE);
        free(path);
        r->free_next = trace.free_list;
        trace.free_list = r;
        return NULL;
    }
    trace.live++;
    *is_new = 1;
    return r;
}

/* A copy of text that lives as long as the process when it is one of the few
 * distinct defaults, else NULL (the caller keeps its own copy). */
static const char *intern_locked(const char *text)
{
    for (size_t i = 0; i < trace.ninterned; i++)
        if (!strcmp(trace.interned[i], text))
            return trace.interned[i];
    if (trace.ninterned == MAX_INTERNED)
        return NULL;
    char *copy = strdup(text);
    if (copy)
        trace.interned[trace.ninterned++] = copy;
    return copy;
}

/* The version-2 text of l (version 3 for a mirrored file: every mirror; exact size), or NULL when it would not
 * read back (README "Trace CSV": empty = unknown). */
static char *layout_text(const struct iez_layout *l)
{
    size_t cap = iez_layout_text_cap(l);
    char *text = malloc(cap), *out = NULL;
    struct iez_layout *check = malloc(sizeof *check);
    if (text && check && (l->nmirrors ? iez_layout_format(l, text, cap) : iez_layout_format_v2(l, text, cap)) >= 0 &&
        iez_layout_parse(text, strlen(text), check) == 0)
        out = strdup(text);
    free(text);
    free(check);
    return out;
}

/* The Lustre layout of fd into r: its text, and the stripe count and size of the component with the file's end. */
static void take_lustre_layout(struct record *r, int fd)
{
    struct iez_layout *l = malloc(sizeof *l);
    if (l && iez_lustre_getlayout(fd, l, 1) == 0) {
        if (l->stripe_count > 0) {
            r->stripe_count = l->stripe_count;
            r->stripe_size = l->stripe_size;
        }
        char *text = layout_text(l);
        if (text) {
            char *old = __atomic_exchange_n(&r->layout, text, __ATOMIC_ACQ_REL);
            free(old);
        }
    }
    free(l);
}

/* The directory's default when the file is first seen: what iez learns the file under. */
static void take_dir_layout(struct record *r, const char *abspath)
{
    char *text = malloc(IEZ_TEMPLATE_MAX);
    struct iez_layout *check = malloc(sizeof *check);
    int rc = text && check ? iez_dir_default_template(abspath, r->lustre, text, IEZ_TEMPLATE_MAX) : -1;
    /* only text iez.trace reads back: a default iez cannot read is learnt as none, then skipped */
    if (rc == 0 && text[0] && iez_layout_parse(text, strlen(text), check) == 0) {
        take();
        if (r->path && !strcmp(r->path, abspath) && !__atomic_load_n(&r->dir_layout, __ATOMIC_ACQUIRE)) {
            const char *shared = intern_locked(text);
            char *own = shared ? NULL : strdup(text);
            if (shared || own) {
                r->dir_owned = own != NULL;
                __atomic_store_n(&r->dir_layout, shared ? shared : own, __ATOMIC_RELEASE);
            }
        }
        give();
    }
    free(text);
    free(check);
}

static void raise_fd_high(int fd)
{
    int seen = __atomic_load_n(&trace.fd_high, __ATOMIC_RELAXED);
    while (seen <= fd &&
           !__atomic_compare_exchange_n(&trace.fd_high, &seen, fd + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

static struct record *attach(const char *abspath, int fd, int pin)
{
    iez_busy++;
    take();
    init_locked();
    int is_new = 0;
    struct record *r = get_locked(abspath, &is_new);
    if (r) {
        if (!r->opened_here)
            r->open_time = iez_now();
        r->opened_here = 1;
        r->pinned |= (unsigned char)pin;
        if (fd >= 0 && (size_t)fd < nfds) {
            raise_fd_high(fd);
            __atomic_store_n(&fds[fd], r, __ATOMIC_RELEASE);
        }
    }
    give();
    if (r && is_new) {
        /* outside the lock: file system calls; r stays ours while fd (or the pin) holds it */
        r->lustre = (unsigned char)iez_is_lustre_dir(abspath);
        if (r->lustre && fd >= 0)
            take_lustre_layout(r, fd);
        take_dir_layout(r, abspath);
    }
    iez_busy--;
    return r;
}

static int writes(int flags)
{
    return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC | O_APPEND));
}

void iez_trace_stream(int fd, FILE *fp)
{
    struct record **table = (struct record **)__atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    struct record *r = table && fd >= 0 && (size_t)fd < nfds ? __atomic_load_n(&table[fd], __ATOMIC_ACQUIRE) : NULL;
    if (r && fp && iez_is_owner()) {
        r->stream_fd = fd;
        __atomic_store_n(&r->stream, fp, __ATOMIC_RELEASE);
    }
}

/* The stream of r is no longer on fd (closed, or another file put there). */
static void stream_gone(struct record *r, int fd)
{
    if (__atomic_load_n(&r->stream, __ATOMIC_ACQUIRE) && r->stream_fd == fd)
        __atomic_store_n(&r->stream, NULL, __ATOMIC_RELEASE);
    iez_stream_marks[fd].fp = NULL; /* a stream seen on fd before is not the next one's */
}

/* Every stream still writing a traced file (at exit, fflush(NULL), fcloseall): what its program
 * stored in its buffer is counted before it is flushed. Only streams known to be alive: stdout,
 * stderr, and those fopen, freopen and fdopen made while the descriptor is theirs. */
void iez_trace_streams_look(void)
{
    struct record **table = (struct record **)__atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    int high = __atomic_load_n(&trace.fd_high, __ATOMIC_ACQUIRE);
    for (int fd = 0; table && fd < high; fd++) {
        FILE *fp = iez_stream_marks[fd].fp;
        struct record *r = __atomic_load_n(&table[fd], __ATOMIC_ACQUIRE);
        if (fp && r && (fp == stdout || fp == stderr ||
                        (__atomic_load_n(&r->stream, __ATOMIC_ACQUIRE) == fp && r->stream_fd == fd)))
            iez_trace_stream_look(fp);
    }
}

/* A descriptor the kernel handed out again was closed behind iez's back
 * (a raw system call, libc internally): what its number held is stale. */
static void fd_reused(int fd)
{
    struct record **table = (struct record **)__atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    if (table && fd >= 0 && (size_t)fd < nfds && __atomic_load_n(&table[fd], __ATOMIC_RELAXED) && iez_is_owner()) {
        struct record *r = __atomic_exchange_n(&table[fd], NULL, __ATOMIC_ACQ_REL);
        if (r)
            stream_gone(r, fd);
    }
}

static struct record *opened(int dirfd, const char *path, int fd, int flags)
{
    fd_reused(fd);
    if (!writes(flags) || !path)
        return NULL;
    int saved = errno;
    char abspath[IEZ_PATH_MAX];
    struct record *r = NULL;
    if (iez_abspath(dirfd, path, abspath, sizeof abspath) == 0 && iez_path_considered(abspath)) {
        struct stat st;
        /* Only regular files: not terminals, pipes or devices opened by path. */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            r = attach(abspath, fd, 0);
    }
    errno = saved;
    return r;
}

int iez_trace_stdio_writes(const char *mode)
{
    return mode && (strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+'));
}

/* An open the application made, traced on libiez's stack (scratch.c): a path, a stat and a record. */
struct opened_args {
    int dirfd, fd, flags;
    const char *path;
    FILE *fp;
};

static void on_stack_opened(void *p)
{
    struct opened_args *a = p;
    struct record *r = opened(a->dirfd, a->path, a->fd, a->flags);
    if (r && a->fp) {
        r->stream_fd = a->fd;
        __atomic_store_n(&r->stream, a->fp, __ATOMIC_RELEASE);
        iez_trace_stream_marked(a->fd, a->fp);
    }
}

void iez_trace_opened(int dirfd, const char *path, int fd, int flags)
{
    struct opened_args a = { dirfd, fd, flags, path, NULL };
    iez_on_stack(on_stack_opened, &a); /* when it cannot run, the file goes untraced */
}

void iez_trace_opened_file(const char *path, FILE *fp, const char *mode)
{
    int saved = errno;
    int fd = fileno(fp);
    errno = saved;
    struct opened_args a = { AT_FDCWD, fd, iez_trace_stdio_writes(mode) ? O_WRONLY : O_RDONLY, path, fp };
    if (fd >= 0)
        iez_on_stack(on_stack_opened, &a);
}


void *iez_trace_detach(int fd)
{
    struct record **table = (struct record **)__atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    if (!table || fd < 0 || (size_t)fd >= nfds)
        return NULL;
    struct record *r = __atomic_load_n(&table[fd], __ATOMIC_ACQUIRE);
    if (!r || !iez_is_owner())
        return NULL; /* a vfork() child closing descriptors must not unbind the parent's */
    /* held before the slot lets go, so that it is never written early with the size before the flush */
    __atomic_add_fetch(&r->closing, 1, __ATOMIC_ACQ_REL);
    struct record *got = __atomic_exchange_n(&table[fd], NULL, __ATOMIC_ACQ_REL);
    if (got != r) { /* another thread changed the slot meanwhile */
        __atomic_sub_fetch(&r->closing, 1, __ATOMIC_ACQ_REL);
        if (got)
            __atomic_add_fetch(&got->closing, 1, __ATOMIC_ACQ_REL);
    }
    if (got)
        stream_gone(got, fd);
    return got;
}

void iez_trace_closing(int fd)
{
    struct record *r = iez_trace_detach(fd);
    if (!r)
        return;
    int saved = errno;
    struct stat st;
    if (fstat(fd, &st) == 0)
        __atomic_store_n(&r->size, (int64_t)st.st_size, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&r->closing, 1, __ATOMIC_ACQ_REL);
    errno = saved;
}

/* A traced file renamed (README "Renames"): its record takes the new name. A record already under that
 * name (a file the rename replaced) stays: both rows have the name, and iez trace parse merges them. */
void iez_trace_renamed(const char *from, const char *to)
{
    if (holding || !iez_is_owner())
        return; /* a handler interrupted this thread inside the lock; a vfork() child shares the table */
    char *path = strdup(to);
    if (!path)
        return;
    iez_busy++;
    take();
    struct record *r = find_locked(from, hash(from));
    /* room first: after the removal the insertion cannot fail */
    if (r && ((trace.nused + 1) * 2 <= trace.nslots || grow_locked() == 0)) {
        remove_locked(r);
        r->hash = hash(path);
        free(__atomic_exchange_n(&r->path, path, __ATOMIC_ACQ_REL));
        path = NULL;
        insert_locked(r);
        /* the directory's default is the new directory's */
        const char *dir = __atomic_exchange_n(&r->dir_layout, NULL, __ATOMIC_ACQ_REL);
        if (r->dir_owned)
            free((char *)dir);
        r->dir_owned = 0;
        give();
        take_dir_layout(r, to);
        iez_busy--;
        return;
    }
    give();
    iez_busy--;
    free(path);
}

/* The size of the record's file now (its descriptor is gone), under the lock so the path stays. */
static void size_by_path(struct record *r)
{
    int saved = errno;
    iez_busy++;
    take();
    struct stat st;
    if (r->path && stat(r->path, &st) == 0)
        __atomic_store_n(&r->size, (int64_t)st.st_size, __ATOMIC_RELAXED);
    give();
    iez_busy--;
    errno = saved;
}

void iez_trace_size_by_path(void *record)
{
    struct record *r = record;
    size_by_path(r);
    __atomic_sub_fetch(&r->closing, 1, __ATOMIC_ACQ_REL);
}

void iez_trace_bind(int fd, void *record)
{
    struct record **table = (struct record **)__atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    if (!table || !record || fd < 0 || (size_t)fd >= nfds || !iez_is_owner())
        return;
    raise_fd_high(fd);
    __atomic_store_n(&table[fd], (struct record *)record, __ATOMIC_RELEASE);
}

void iez_trace_copied(int oldfd, int newfd)
{
    struct record **table = (struct record **)__atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    if (!table || oldfd == newfd || newfd < 0 || (size_t)newfd >= nfds || iez_busy)
        return;
    struct record *r = oldfd >= 0 && (size_t)oldfd < nfds ? __atomic_load_n(&table[oldfd], __ATOMIC_ACQUIRE) : NULL;
    if (!r && !__atomic_load_n(&table[newfd], __ATOMIC_RELAXED))
        return; /* neither is traced: nothing changes (and no getpid) */
    if (!iez_is_owner())
        return;
    if (r)
        raise_fd_high(newfd);
    struct record *prev = __atomic_exchange_n(&table[newfd], r, __ATOMIC_ACQ_REL);
    /* dup2/dup3 closed what newfd was; for dup and F_DUPFD prev can only be stale */
    if (prev && prev != r) {
        stream_gone(prev, newfd);
        size_by_path(prev);
    }
}

void iez_trace_closed_range(unsigned first, unsigned last)
{
    struct record **table = (struct record **)__atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    if (!table)
        return;
    unsigned high = (unsigned)__atomic_load_n(&trace.fd_high, __ATOMIC_ACQUIRE);
    for (unsigned fd = first; fd < high && fd <= last; fd++) {
        struct record *r = iez_trace_detach((int)fd);
        if (r)
            iez_trace_size_by_path(r);
    }
}

void *iez_trace_record_for(const char *abspath)
{
    return attach(abspath, -1, 1);
}

void iez_trace_add_bytes(void *record, uint64_t bytes)
{
    if (record)
        __atomic_add_fetch(&((struct record *)record)->bytes, bytes, __ATOMIC_RELAXED);
}

int iez_trace_has_records(void)
{
    FOR_EACH_RECORD(r)
        if (r->opened_here || __atomic_load_n(&r->bytes, __ATOMIC_RELAXED))
            return 1;
    return 0;
}

/* After a report was written but the process goes on (a failed exec): count afresh. */
void iez_trace_forget_written(void)
{
    take();
    FOR_EACH_RECORD(r) {
        __atomic_store_n(&r->bytes, 0, __ATOMIC_RELAXED);
        r->opened_here = 0;
    }
    trace.finished = 0;
    trace.spill_failed = 0;
    give();
}

/* A child starts with the parent's open descriptors but none of its bytes. */
void iez_trace_atfork_child(void)
{
    pthread_mutex_init(&trace.lock, NULL);
    holding = 0;
    FOR_EACH_RECORD(r) {
        r->bytes = 0;
        r->opened_here = 0;
        r->size = -1;
        r->closing = 0; /* the threads that held them are not in the child */
    }
    trace.finished = 0;
    trace.spill_failed = 0;
    trace.exiting = 0;
}

/* ---- rows -------------------------------------------------------------------- */

static int put(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = iez_sys_write(fd, s, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The layout Lustre holds for the file now: components instantiated since the first open included. */
static void refresh_lustre_layout(struct record *r)
{
    int fd = iez_sys_open(r->path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0);
    if (fd < 0)
        return; /* removed or renamed meanwhile: the layout of the first open stands */
    take_lustre_layout(r, fd);
    iez_sys_close(fd);
}

/* Appends ",<field>" CSV-quoted to buf at *n; text NULL is empty. */
static int add_field(char *buf, size_t cap, size_t *n, const char *text)
{
    if (*n + 2 > cap)
        return -1;
    buf[(*n)++] = ',';
    buf[*n] = '\0';
    if (!text || !*text)
        return 0;
    if (iez_csv_field(buf + *n, cap - *n, text))
        return -1;
    *n += strlen(buf + *n);
    return 0;
}

int iez_trace_write_header(int fd)
{
    static const char header[] = "path,bytes_written,file_size,stripe_count,stripe_size,rank,comm_size,open_time,pid,"
                                 "host,app,job,layout,dir_layout\n";
    return put(fd, header, sizeof header - 1);
}

/* What every row of this process repeats. */
struct row_common {
    int rank, size, pid;
    char host[600], app[600], job[600];
};

static void row_common(struct row_common *c)
{
    const struct iez_config *cfg = iez_cfg();
    iez_rank(&c->rank, &c->size);
    c->pid = (int)getpid();
    iez_csv_field(c->host, sizeof c->host, cfg->host);
    iez_csv_field(c->app, sizeof c->app, cfg->app);
    iez_csv_field(c->job, sizeof c->job, cfg->job);
}

/* Where the file will end once exit() flushes the stream it is still open as
 * (glibc flushes stdio after every destructor, so after the trace is written):
 * the descriptor's offset, or the file's end for O_APPEND, plus the bytes the
 * stream holds (__fpending); -1 when it has no such stream. Exit only: the
 * stream's memory is not freed while the process still runs its handlers. */
static int64_t stream_end(struct record *r)
{
    FILE *fp = __atomic_load_n(&r->stream, __ATOMIC_ACQUIRE);
    int fd = r->stream_fd;
    struct record **table = fds;
    if (!fp || !table || fd < 0 || (size_t)fd >= nfds || __atomic_load_n(&table[fd], __ATOMIC_ACQUIRE) != r)
        return -1;
    size_t pending = iez_stream_pending(fp);
    int fl = fcntl(fd, F_GETFL);
    off_t at = fl < 0 ? -1 : (fl & O_APPEND) ? lseek(fd, 0, SEEK_END) : lseek(fd, 0, SEEK_CUR);
    if (at < 0 || pending > ((size_t)1 << 40))
        return -1;
    return (int64_t)at + (int64_t)pending;
}

/* Rows are gathered in a buffer of this size and written when it fills. */
#define ROWS_BUF (256 * 1024)

/* Adds r's row to buf (flushed to fd when full); 0, or -1 when the row or the write fails. */
static int add_row(int fd, char *buf, size_t *used, const struct row_common *c, struct record *r)
{
    uint64_t bytes = __atomic_load_n(&r->bytes, __ATOMIC_RELAXED);
    if (!r->opened_here && !bytes)
        return 0; /* inherited across fork and untouched here */
    int64_t fsize = __atomic_load_n(&r->size, __ATOMIC_RELAXED);
    struct stat st;
    /* still open at exit, or closed through a descriptor iez did not see */
    if (stat(r->path, &st) == 0 && (fsize < 0 || (int64_t)st.st_size > fsize))
        fsize = st.st_size;
    int64_t pending = trace.exiting ? stream_end(r) : -1;
    if (pending > fsize)
        fsize = pending;
    if (r->lustre)
        refresh_lustre_layout(r);
    const char *layout = __atomic_load_n(&r->layout, __ATOMIC_ACQUIRE);
    const char *dir = __atomic_load_n(&r->dir_layout, __ATOMIC_ACQUIRE);
    size_t need = 2 * strlen(r->path) + 2 * (layout ? strlen(layout) : 0) + 2 * (dir ? strlen(dir) : 0) + 4096;
    if (ROWS_BUF - *used < need) {
        if (put(fd, buf, *used))
            return -1;
        *used = 0;
    }
    if (need > ROWS_BUF)
        return -1;
    char *line = buf + *used;
    size_t cap = ROWS_BUF - *used;
    if (iez_csv_field(line, cap, r->path))
        return -1;
    size_t n = strlen(line);
    int m = snprintf(line + n, cap - n, ",%llu,%lld,%d,%llu,%d,%d,%.6f,%d,%s,%s,%s", (unsigned long long)bytes,
                     (long long)fsize, r->stripe_count, (unsigned long long)r->stripe_size, c->rank, c->size,
                     r->open_time, c->pid, c->host, c->app, c->job);
    if (m < 0 || (size_t)m >= cap - n)
        return -1;
    n += (size_t)m;
    if (add_field(line, cap, &n, layout) || add_field(line, cap, &n, dir) || n + 2 > cap)
        return -1;
    line[n++] = '\n';
    *used += n;
    return 0;
}

/* Writes the rows of every record no descriptor, MPI handle or fclose holds,
 * and reuses them. The next time comes after max_files / 2 new files at the
 * least, so a process holding many files open does not scan at every open:
 * live records stay below max_files + the ones held. */
static void spill_locked(void)
{
    struct record **table = fds;
    unsigned epoch = ++trace.spill_epoch;
    if (!epoch)
        epoch = ++trace.spill_epoch;
    /* every record a descriptor holds stays: its bytes are still coming */
    int high = __atomic_load_n(&trace.fd_high, __ATOMIC_ACQUIRE);
    for (int fd = 0; table && fd < high; fd++) {
        struct record *r = __atomic_load_n(&table[fd], __ATOMIC_ACQUIRE);
        if (r)
            r->mark = epoch;
    }
    char *buf = malloc(ROWS_BUF);
    int fd = buf ? iez_report_trace_fd() : -1;
    struct row_common *c = malloc(sizeof *c);
    if (c)
        row_common(c);
    size_t used = 0, written = 0, dropped = 0;
    int rc = fd >= 0 && c ? 0 : -1;
    for (size_t ci = 0; ci < trace.nchunks; ci++)
        for (struct record *r = trace.chunks[ci]; r < trace.chunks[ci] + CHUNK; r++) {
            if (!r->path || r->mark == epoch || r->pinned || __atomic_load_n(&r->closing, __ATOMIC_ACQUIRE))
                continue;
            if (rc == 0 && add_row(fd, buf, &used, c, r) == 0)
                written++;
            else
                dropped++, rc = -1;
            release_locked(r);
        }
    if (rc == 0 && used && put(fd, buf, used))
        rc = -1;
    if (fd >= 0 && iez_sys_close(fd) != 0)
        rc = -1;
    if (rc && fd >= 0)
        trace.spill_failed = 1; /* a row may be cut: the file is removed at exit rather than read */
    if (rc)
        iez_debug("trace: %zu files' rows could not be written early (IEZ_TRACE_DIR unset or not writable): "
                  "they are not in the trace", dropped);
    else
        iez_debug("trace: %zu files' rows written early (IEZ_TRACE_MAX_FILES %zu reached)", written, trace.max_files);
    free(buf);
    free(c);
    size_t next = trace.live + trace.max_files / 2;
    trace.spill_at = next > trace.max_files ? next : trace.max_files;
}

/* At exit. The lock's holder does bounded work (a record, or early rows written
 * to the trace directory), so waiting for it ends; the one thread that must
 * not wait is the holder itself, left by a signal handler that exits: then the
 * records may be half changed and the trace is not written. */
int iez_trace_finish(void)
{
    if (holding) {
        iez_debug("trace: exit from inside libiez's tracing (a signal handler): the trace is not written");
        iez_report_trace_done(-1);
        return -1;
    }
    take();
    int rc = -1;
    int fd = iez_report_trace_fd();
    char *buf = malloc(ROWS_BUF);
    struct row_common *c = malloc(sizeof *c);
    if (fd >= 0 && buf && c) {
        row_common(c);
        size_t used = 0;
        rc = 0;
        FOR_EACH_RECORD(r)
            if (rc == 0 && add_row(fd, buf, &used, c, r))
                rc = -1;
        if (rc == 0 && used && put(fd, buf, used))
            rc = -1;
    }
    if (fd >= 0 && iez_sys_close(fd) != 0)
        rc = -1;
    if (trace.spill_failed)
        rc = -1;
    free(buf);
    free(c);
    iez_report_trace_done(rc);
    trace.finished = 1;
    give();
    return rc;
}
