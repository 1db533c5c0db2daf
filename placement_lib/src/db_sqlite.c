/* SQLite backend: a read-only connection that never creates the file, with a
 * busy handler and a progress handler holding each lookup to the create's
 * deadline.
 *
 * The SQLite here is libiez's own: a copy linked in statically with every
 * symbol hidden (Makefile), never the application's. An application's SQLite
 * calls open() while holding its own locks (a WAL database's shared-memory
 * file is opened under SQLite's global VFS mutex), and that open is a create
 * libiez looks up: with one SQLite in the process the lookup waited for that
 * mutex forever. The private copy shares no mutex, no per-file table, no
 * descriptor with the application's, and its system calls are libiez's:
 * - open: refused for a file the application has open itself (POSIX record
 *   locks are per process, and closing any descriptor of a file drops every
 *   lock the process holds on it), and moved above the application's range
 *   (fds.c);
 * - close: a descriptor of a file the application opened since is kept, for
 *   the same reason;
 * - fcntl: record locks become open-file-description locks (F_OFD_*), which
 *   conflict with the application's POSIX locks as another process's would,
 *   instead of merging with them (a read lock of libiez's would silently
 *   downgrade the application's write lock on the same bytes, and its unlock
 *   remove it);
 * - reads and writes: libc's, not libiez's interposers. */
#include "real.h"

#ifdef IEZ_HAVE_SQLITE
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sqlite_conn {
    sqlite3 *db;
    sqlite3_stmt *stmt;
    double deadline;
};

/* The module's state (all of it under the DB lock, db.c). */
static struct {
    int hooked;                   /* the private copy's system calls are libiez's */
    struct sqlite_conn *inherited; /* the connection of the parent of this fork() child, to close */
    int disposing;                /* closing it: its locks are the parent's too (shared descriptions) */
} sq;

static int hook_open(const char *path, int flags, int mode)
{
    struct stat st;
    if (stat(path, &st) == 0 && iez_fd_open_elsewhere(st.st_dev, st.st_ino, -1)) {
        iez_debug("the application has %s open itself: libiez does not open it (its locks are per process)", path);
        errno = EACCES;
        return -1;
    }
    int fd = iez_sys_open(path, flags | O_CLOEXEC, (unsigned)mode);
    return fd < 0 ? fd : iez_fd_hide(fd);
}

static int hook_close(int fd)
{
    struct stat st;
    int keep = fstat(fd, &st) == 0 && iez_fd_open_elsewhere(st.st_dev, st.st_ino, fd);
    iez_fd_forget(fd);
    if (keep) {
        iez_debug("descriptor %d of the DB is kept open: the application opened the same file", fd);
        return 0;
    }
    return iez_sys_close(fd);
}

static int hook_fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int ofd = cmd == F_SETLK ? F_OFD_SETLK : cmd == F_SETLKW ? F_OFD_SETLKW : cmd == F_GETLK ? F_OFD_GETLK : 0;
    if (ofd) {
        if (sq.disposing && ofd != F_OFD_GETLK)
            return 0; /* the parent's locks: a fork() child's close must not release them */
        ((struct flock *)arg)->l_pid = 0; /* F_OFD_* require it; SQLite leaves it unset */
        cmd = ofd;
    }
    return (int)syscall(SYS_fcntl, fd, cmd, arg);
}

/* SQLite's memory (issue 31 item 2): never glibc's malloc. A create may come from a signal handler
 * that interrupted the application inside malloc (open() is async-signal-safe); a lookup that
 * called malloc there would deadlock on the arena's lock. libiez's own copy of SQLite therefore
 * allocates from memory it maps itself: power-of-two blocks (16 bytes to 1 MiB, a 16-byte header
 * naming the class) carved from 1 MiB regions and kept on per-class free lists, larger blocks
 * mapped one by one. Every call into SQLite is made under the DB lock (db.c), so the lists need no
 * lock of their own; mmap and munmap are system calls, safe anywhere. */
#define POOL_MIN_SHIFT 4
#define POOL_MAX_SHIFT 20
#define POOL_HEAD 16u
#define POOL_REGION (1u << 20)
struct pool_block {
    struct pool_block *next;
};
static struct {
    struct pool_block *free[POOL_MAX_SHIFT + 1];
    unsigned char *next, *end;
} pool;

static unsigned pool_class(size_t n)
{
    unsigned k = POOL_MIN_SHIFT;
    while (k <= POOL_MAX_SHIFT && ((size_t)1 << k) < n + POOL_HEAD)
        k++;
    return k;
}

static void *pool_malloc(int n)
{
    if (n <= 0)
        return NULL;
    unsigned k = pool_class((size_t)n);
    unsigned char *b;
    if (k > POOL_MAX_SHIFT) {
        size_t len = ((size_t)n + POOL_HEAD + 4095) & ~(size_t)4095;
        b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED)
            return NULL;
        ((uint64_t *)b)[0] = 0;
        ((uint64_t *)b)[1] = len;
        return b + POOL_HEAD;
    }
    if (pool.free[k]) {
        b = (unsigned char *)pool.free[k];
        pool.free[k] = pool.free[k]->next;
    } else {
        size_t size = (size_t)1 << k;
        if ((size_t)(pool.end - pool.next) < size) {
            unsigned char *r = mmap(NULL, POOL_REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (r == MAP_FAILED)
                return NULL;
            pool.next = r; /* the rest of the old region is left unused */
            pool.end = r + POOL_REGION;
        }
        b = pool.next;
        pool.next += size;
    }
    ((uint64_t *)b)[0] = k;
    ((uint64_t *)b)[1] = ((size_t)1 << k) - POOL_HEAD;
    return b + POOL_HEAD;
}

static void pool_free_block(void *p)
{
    if (!p)
        return;
    unsigned char *b = (unsigned char *)p - POOL_HEAD;
    uint64_t k = ((uint64_t *)b)[0];
    if (k == 0) {
        munmap(b, (size_t)((uint64_t *)b)[1]);
        return;
    }
    struct pool_block *f = (struct pool_block *)b;
    f->next = pool.free[k];
    pool.free[k] = f;
}

static int pool_size(void *p)
{
    if (!p)
        return 0;
    uint64_t *h = (uint64_t *)((unsigned char *)p - POOL_HEAD);
    return (int)(h[0] == 0 ? h[1] - POOL_HEAD : h[1]);
}

static void *pool_realloc(void *p, int n)
{
    if (!p)
        return pool_malloc(n);
    int have = pool_size(p);
    if (n <= have)
        return p;
    void *q = pool_malloc(n);
    if (q) {
        memcpy(q, p, (size_t)have);
        pool_free_block(p);
    }
    return q;
}

static int pool_roundup(int n)
{
    unsigned k = pool_class((size_t)n);
    return k > POOL_MAX_SHIFT ? n : (int)(((size_t)1 << k) - POOL_HEAD);
}

static int pool_init(void *arg) { return SQLITE_OK; }
static void pool_shutdown(void *arg) {}

static const sqlite3_mem_methods pool_methods = { pool_malloc, pool_free_block, pool_realloc, pool_size,
                                                  pool_roundup, pool_init, pool_shutdown, NULL };

/* Once, before the first connection: SQLite reads its system-call table at each call. */
static int hook(void)
{
    if (sq.hooked)
        return 0;
    static int configured;
    if (!configured) {
        /* before SQLite initializes itself: its memory is libiez's own (above); no lookaside */
        if (sqlite3_config(SQLITE_CONFIG_MALLOC, &pool_methods) != SQLITE_OK ||
            sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) != SQLITE_OK)
            return -1;
        configured = 1;
    }
    sqlite3_vfs *vfs = sqlite3_initialize() == SQLITE_OK ? sqlite3_vfs_find("unix") : NULL;
    if (!vfs || !vfs->xSetSystemCall)
        return -1;
    if (vfs->xSetSystemCall(vfs, "open", (sqlite3_syscall_ptr)hook_open) != SQLITE_OK ||
        vfs->xSetSystemCall(vfs, "close", (sqlite3_syscall_ptr)hook_close) != SQLITE_OK ||
        vfs->xSetSystemCall(vfs, "fcntl", (sqlite3_syscall_ptr)hook_fcntl) != SQLITE_OK)
        return -1;
    /* the real functions, past libiez's interposers (real.c: a missing one's stand-in, as an interposer's call) */
#define DIRECT(name) { #name, IEZ_REAL_##name }
    static const struct {
        const char *name;
        enum iez_real_symbol sym;
    } direct[] = { DIRECT(read), DIRECT(pread), DIRECT(pread64), DIRECT(write), DIRECT(pwrite), DIRECT(pwrite64),
                   DIRECT(ioctl) };
#undef DIRECT
    for (size_t i = 0; i < sizeof direct / sizeof *direct; i++) /* NOTFOUND: not in this build */
        vfs->xSetSystemCall(vfs, direct[i].name, (sqlite3_syscall_ptr)iez_real_cached(direct[i].sym));
    sq.hooked = 1;
    return 0;
}

static int past_deadline(void *arg)
{
    return iez_mono() > ((struct sqlite_conn *)arg)->deadline;
}

/* Another process holds a lock: wait a little, never past the deadline (0 gives up: SQLITE_BUSY). */
static int busy(void *arg, int tries)
{
    double left = ((struct sqlite_conn *)arg)->deadline - iez_mono();
    if (left <= 0)
        return 0;
    double step = tries < 4 ? 0.001 : 0.005;
    if (step > left)
        step = left;
    struct timespec ts = { 0, (long)(step * 1e9) };
    nanosleep(&ts, NULL);
    return 1;
}

static void sqlite_close(void *arg)
{
    struct sqlite_conn *c = arg;
    iez_busy++;
    sqlite3_finalize(c->stmt);
    sqlite3_close_v2(c->db);
    iez_busy--;
    c->db = NULL;
    c->stmt = NULL;
}

static void *sqlite_connect(const struct iez_config *cfg, double deadline)
{
    if (sq.inherited) {
        /* SQLite keeps per-file state (locks, the WAL index, descriptors) for the whole copy: the
         * parent's connection is closed first, without touching the locks its descriptions hold -
         * unless the application closed or replaced one of its descriptors meanwhile */
        if (!iez_fds_intact()) {
            iez_debug("the parent's SQLite connection lost its descriptors in this child");
            return NULL;
        }
        sq.disposing = 1;
        sqlite_close(sq.inherited);
        sq.disposing = 0;
        sq.inherited = NULL;
        iez_fd_forget_all();
    }
    struct stat st;
    if (stat(cfg->db_file, &st) != 0) {
        /* nothing to open (IEZ_DB unset and no DB at the default place): found before anything is
         * set up or allocated, so a create in a signal handler costs one stat */
        iez_debug("SQLite %s: %s", cfg->db_file, strerror(errno));
        return NULL;
    }
    if (hook() != 0) {
        iez_debug("SQLite: cannot give libiez's own SQLite its system calls");
        return NULL;
    }
    static struct sqlite_conn one; /* one connection per process, made and closed under the DB lock */
    struct sqlite_conn *c = &one;
    memset(c, 0, sizeof *c);
    c->deadline = deadline;
    iez_busy++;
    int rc = sqlite3_open_v2(cfg->db_file, &c->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_handler(c->db, busy, c);
        sqlite3_progress_handler(c->db, 200, past_deadline, c);
        rc = sqlite3_prepare_v2(c->db, IEZ_PLACEMENTS_QUERY "?1 LIMIT 1", -1, &c->stmt, NULL);
    }
    iez_busy--;
    iez_db_connect_late = rc == SQLITE_INTERRUPT; /* the progress handler: the deadline passed meanwhile */
    if (rc != SQLITE_OK) {
        iez_debug("SQLite %s: %s", cfg->db_file, c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        sqlite_close(c);
        return NULL;
    }
    return c;
}

static const char *column_text(sqlite3_stmt *stmt, int i)
{
    return sqlite3_column_type(stmt, i) == SQLITE_NULL ? NULL : (const char *)sqlite3_column_text(stmt, i);
}

static int sqlite_lookup(void *arg, const char *abspath, struct iez_alloc *out, double deadline)
{
    struct sqlite_conn *c = arg;
    c->deadline = deadline;
    int result = IEZ_LOOKUP_ERROR;
    iez_busy++;
    sqlite3_reset(c->stmt);
    sqlite3_bind_text(c->stmt, 1, abspath, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(c->stmt);
    if (rc == SQLITE_ROW) {
        result = iez_db_row(abspath, sqlite3_column_int64(c->stmt, 0), sqlite3_column_int(c->stmt, 1),
                            column_text(c->stmt, 2), column_text(c->stmt, 3), column_text(c->stmt, 4), out);
    } else if (rc == SQLITE_DONE) {
        result = IEZ_LOOKUP_MISSING;
    } else if (rc == SQLITE_INTERRUPT) {
        result = IEZ_LOOKUP_LATE; /* the progress handler: the deadline passed while the query ran */
        iez_debug("SQLite lookup of %s: interrupted at the create's deadline", abspath);
    } else {
        iez_debug("SQLite lookup of %s: %s", abspath, sqlite3_errmsg(sqlite3_db_handle(c->stmt)));
    }
    sqlite3_reset(c->stmt);
    sqlite3_clear_bindings(c->stmt);
    iez_busy--;
    return result;
}

/* A fork() child: the parent's connection is closed at the child's first connect (above); its
 * descriptors stay recorded (fds.c) until then. */
static void sqlite_abandon(void *arg)
{
    if (!sq.inherited)
        sq.inherited = arg;
}

const struct iez_backend iez_sqlite_backend = { "sqlite", sqlite_connect, sqlite_lookup, sqlite_abandon,
                                                sqlite_close, 0 };
#else
const struct iez_backend iez_sqlite_backend = { "sqlite", 0, 0, 0, 0, 0 };
#endif
