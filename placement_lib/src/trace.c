/* Tracing mode (the paper's miniRecorder): per file, the bytes this process
 * wrote, the size it left, its layout on Lustre and its directory's default
 * layout. A write costs one array load and one atomic add: the fd table maps
 * descriptors to file records directly. */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

struct record {
    uint64_t bytes;           /* atomic; first, so iez_count_write can add without knowing the rest */
    struct record *next;      /* all records, newest first */
    struct record *hash_next;
    char *path;
    int64_t size;             /* -1: unknown */
    double open_time;
    int stripe_count;
    uint64_t stripe_size;
    int opened_here;          /* 0 for records inherited across fork() */
    int lustre;
    char *layout;             /* atomic; Lustre: the file's layout, version 2; NULL: unknown */
    char *dir_layout;         /* atomic; canonical template of the directory's default; NULL: none */
};

#define BUCKETS 4096
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct record *buckets[BUCKETS];
static struct record *all;
void **iez_fd_records;        /* fd -> struct record *, atomics (iez.h) */
size_t iez_fd_records_len;
#define fds ((struct record **)iez_fd_records)
#define nfds iez_fd_records_len
IEZ_TLS int iez_in_mpi_write;

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static void ensure_fd_table(void)
{
    if (fds)
        return;
    struct rlimit rl;
    size_t n = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > n)
        n = (size_t)rl.rlim_cur;
    if (n > (1u << 20))
        n = 1u << 20; /* descriptors above this are not traced, only sized at exit */
    void **table = calloc(n, sizeof *table);
    if (table) {
        iez_fd_records_len = n;
        __atomic_store_n(&iez_fd_records, table, __ATOMIC_RELEASE);
    }
}

/* Record for abspath, created on first sight; caller holds lock. */
static struct record *get_locked(const char *abspath, int *is_new)
{
    uint64_t h = hash(abspath) % BUCKETS;
    for (struct record *r = buckets[h]; r; r = r->hash_next)
        if (!strcmp(r->path, abspath)) {
            *is_new = 0;
            return r;
        }
    struct record *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->path = strdup(abspath);
    if (!r->path) {
        free(r);
        return NULL;
    }
    r->size = -1;
    r->open_time = iez_now();
    r->stripe_count = iez_cfg()->default_stripe_count;
    r->hash_next = buckets[h];
    buckets[h] = r;
    r->next = all;
    all = r;
    *is_new = 1;
    return r;
}

/* The version-2 text of l, or NULL when it would not read back (README "Trace CSV": empty = unknown). */
static char *layout_text(const struct iez_layout *l)
{
    size_t cap = iez_layout_text_cap(l);
    char *text = malloc(cap);
    struct iez_layout *check = malloc(sizeof *check);
    if (!text || !check || iez_layout_format_v2(l, text, cap) < 0 || iez_layout_parse(text, strlen(text), check)) {
        free(text);
        text = NULL;
    }
    free(check);
    return text;
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
static void take_dir_layout(struct record *r)
{
    char *text = malloc(IEZ_TEMPLATE_MAX);
    if (!text)
        return;
    struct iez_layout *check = malloc(sizeof *check);
    int rc = check ? iez_dir_default_template(r->path, r->lustre, text, IEZ_TEMPLATE_MAX) : -1;
    /* only text iez.trace reads back: a default iez cannot read is learnt as none, then skipped */
    if (rc == 0 && text[0] && iez_layout_parse(text, strlen(text), check) == 0)
        __atomic_store_n(&r->dir_layout, text, __ATOMIC_RELEASE);
    else
        free(text); /* none, or unreadable: the column stays empty */
    free(check);
}

static struct record *attach(const char *abspath, int fd)
{
    iez_busy++;
    pthread_mutex_lock(&lock);
    ensure_fd_table();
    int is_new = 0;
    struct record *r = get_locked(abspath, &is_new);
    if (r) {
        if (!r->opened_here)
            r->open_time = iez_now();
        r->opened_here = 1;
        if (fd >= 0 && (size_t)fd < nfds)
            __atomic_store_n(&fds[fd], r, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
    if (r && is_new) {
        r->lustre = iez_is_lustre_dir(abspath);
        if (r->lustre && fd >= 0)
            take_lustre_layout(r, fd);
        take_dir_layout(r);
    }
    iez_busy--;
    return r;
}

static int writes(int flags)
{
    return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC | O_APPEND));
}

void iez_trace_opened(int dirfd, const char *path, int fd, int flags)
{
    if (!writes(flags) || !path)
        return;
    int saved = errno;
    char abspath[IEZ_PATH_MAX];
    if (iez_abspath(dirfd, path, abspath, sizeof abspath) == 0 && iez_path_considered(abspath)) {
        struct stat st;
        /* Only regular files: not terminals, pipes or devices opened by path. */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            attach(abspath, fd);
    }
    errno = saved;
}

void iez_trace_opened_file(const char *path, FILE *fp, const char *mode)
{
    if (!(strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+')))
        return;
    int saved = errno;
    int fd = fileno(fp);
    errno = saved;
    if (fd >= 0)
        iez_trace_opened(AT_FDCWD, path, fd, O_WRONLY);
}

void *iez_trace_detach(int fd)
{
    struct record **table = (struct record **)__atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    if (!table || fd < 0 || (size_t)fd >= nfds || !__atomic_load_n(&table[fd], __ATOMIC_RELAXED))
        return NULL;
    if (!iez_is_owner())
        return NULL; /* a vfork() child closing descriptors must not unbind the parent's */
    return __atomic_exchange_n(&table[fd], NULL, __ATOMIC_ACQ_REL);
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
    errno = saved;
}

void iez_trace_size_by_path(void *record)
{
    struct record *r = record;
    int saved = errno;
    struct stat st;
    if (stat(r->path, &st) == 0)
        __atomic_store_n(&r->size, (int64_t)st.st_size, __ATOMIC_RELAXED);
    errno = saved;
}

void *iez_trace_record_for(const char *abspath)
{
    return attach(abspath, -1);
}

void iez_trace_add_bytes(void *record, uint64_t bytes)
{
    if (record)
        __atomic_add_fetch(&((struct record *)record)->bytes, bytes, __ATOMIC_RELAXED);
}

int iez_trace_has_records(void)
{
    for (struct record *r = __atomic_load_n(&all, __ATOMIC_ACQUIRE); r; r = r->next)
        if (r->opened_here || __atomic_load_n(&r->bytes, __ATOMIC_RELAXED))
            return 1;
    return 0;
}

/* After a report was written but the process goes on (a failed exec): count afresh. */
void iez_trace_forget_written(void)
{
    pthread_mutex_lock(&lock);
    for (struct record *r = all; r; r = r->next) {
        __atomic_store_n(&r->bytes, 0, __ATOMIC_RELAXED);
        r->opened_here = 0;
    }
    pthread_mutex_unlock(&lock);
}

/* A child starts with the parent's open descriptors but none of its bytes. */
void iez_trace_atfork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    for (struct record *r = all; r; r = r->next) {
        r->bytes = 0;
        r->opened_here = 0;
        r->size = -1;
    }
}

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

/* Writes ",<field>" CSV-quoted; text NULL is empty. */
static int put_field(int fd, const char *text)
{
    if (!text || !*text)
        return put(fd, ",", 1);
    size_t cap = 2 * strlen(text) + 4;
    char *field = malloc(cap);
    int rc = -1;
    if (field && iez_csv_field(field + 1, cap - 1, text) == 0) {
        field[0] = ',';
        rc = put(fd, field, strlen(field));
    }
    free(field);
    return rc;
}

int iez_trace_write_csv(int fd)
{
    const struct iez_config *c = iez_cfg();
    static const char header[] = "path,bytes_written,file_size,stripe_count,stripe_size,rank,comm_size,open_time,pid,"
                                 "host,app,job,layout,dir_layout\n";
    if (put(fd, header, sizeof header - 1))
        return -1;
    int rank, size;
    iez_rank(&rank, &size);
    char host[600], app[600], job[600];
    iez_csv_field(host, sizeof host, c->host);
    iez_csv_field(app, sizeof app, c->app);
    iez_csv_field(job, sizeof job, c->job);
    size_t cap = 2 * IEZ_PATH_MAX + 4096;
    char *line = malloc(cap), *path = malloc(2 * IEZ_PATH_MAX + 3);
    int rc = line && path ? 0 : -1;
    for (struct record *r = all; r && rc == 0; r = r->next) {
        uint64_t bytes = __atomic_load_n(&r->bytes, __ATOMIC_RELAXED);
        if (!r->opened_here && !bytes)
            continue;
        int64_t fsize = __atomic_load_n(&r->size, __ATOMIC_RELAXED);
        struct stat st;
        /* still open at exit, or closed through a descriptor iez did not see */
        if (stat(r->path, &st) == 0 && (fsize < 0 || (int64_t)st.st_size > fsize))
            fsize = st.st_size;
        if (r->lustre)
            refresh_lustre_layout(r);
        iez_csv_field(path, 2 * IEZ_PATH_MAX + 3, r->path);
        int n = snprintf(line, cap, "%s,%llu,%lld,%d,%llu,%d,%d,%.6f,%d,%s,%s,%s", path,
                         (unsigned long long)bytes, (long long)fsize, r->stripe_count,
                         (unsigned long long)r->stripe_size, rank, size, r->open_time, (int)getpid(), host, app, job);
        if (n < 0 || (size_t)n >= cap || put(fd, line, (size_t)n) ||
            put_field(fd, __atomic_load_n(&r->layout, __ATOMIC_ACQUIRE)) ||
            put_field(fd, __atomic_load_n(&r->dir_layout, __ATOMIC_ACQUIRE)) || put(fd, "\n", 1))
            rc = -1;
    }
    free(line);
    free(path);
    return rc;
}
