/* libiez internals: one header for the few types every part shares.
 *
 * The library is preloaded into programs it knows nothing about, so every
 * part follows three rules: never let a failure reach the application (fall
 * back to the plain call, errno untouched), never recurse into itself (its own
 * and the DB clients' file opens go straight to libc), and never block for
 * longer than IEZ_TIMEOUT_MS.
 */
#ifndef IEZ_H
#define IEZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

#define IEZ_EXPORT __attribute__((visibility("default")))
#define IEZ_TLS __thread __attribute__((tls_model("initial-exec")))
#define IEZ_PATH_MAX 4096
#define IEZ_MAX_STRIPES 2000 /* LOV_MAX_STRIPE_COUNT */

enum iez_mode { IEZ_MODE_OFF = 0, IEZ_MODE_PLACE = 1, IEZ_MODE_TRACE = 2 };

/* ---- configuration (config.c) ------------------------------------------ */
struct iez_config {
    enum iez_mode mode;
    int debug;
    int timeout_ms;
    int default_stripe_count;
    char db[IEZ_PATH_MAX + 16];   /* IEZ_DB or the default SQLite path */
    char db_file[IEZ_PATH_MAX];   /* absolute SQLite file, "" for MariaDB */
    char state_dir[IEZ_PATH_MAX];
    char trace_dir[IEZ_PATH_MAX];
    char xattr_name[256];
    char app[256];
    char job[256];
    char host[256];
    char **include; /* NULL-terminated prefix lists, "/" stripped at the end */
    char **exclude;
    double started;
};

const struct iez_config *iez_cfg(void); /* initialises once, thread-safe */
int iez_path_considered(const char *abspath);
double iez_now(void);
void iez_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Re-entry guard: set while libiez itself (or a DB client it called) runs. */
extern IEZ_TLS int iez_busy;
extern IEZ_TLS int iez_in_mpi_write; /* POSIX writes inside MPI-IO writes are not counted twice */

/* ---- real symbols (real.c) --------------------------------------------- */
typedef int (*iez_open_fn)(const char *, int, ...);
typedef int (*iez_openat_fn)(int, const char *, int, ...);
void *iez_real(const char *name, void **slot);
/* Each interposing file keeps its own slots: SLOT(open); ... REAL(open, type).
 * The common case (already resolved) is one load, inlined into the interposer. */
static inline void *iez_real_cached(const char *name, void **slot)
{
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    return __builtin_expect(fn != 0, 1) ? fn : iez_real(name, slot);
}
#define SLOT(name) static void *iez_real_##name
#define REAL(name, type) ((type)iez_real_cached(#name, &iez_real_##name))
int iez_sys_open(const char *path, int flags, unsigned mode);   /* libc open, never ours */
int iez_sys_openat(int dirfd, const char *path, int flags, unsigned mode);
int iez_sys_close(int fd);
ssize_t iez_sys_write(int fd, const void *buf, size_t n);

/* ---- paths (path.c) ---------------------------------------------------- */
/* Absolute, lexically normalised path of (dirfd, path); 0 on success. */
int iez_abspath(int dirfd, const char *path, char *out, size_t outlen);
void iez_normalise(char *path);
int iez_has_prefix(const char *path, const char *prefix);

/* ---- layouts (layout.c) ------------------------------------------------ */
struct iez_layout {
    uint64_t stripe_size;
    int stripe_count;
    uint32_t osts[IEZ_MAX_STRIPES];
};
/* "version=1 stripe_size=... stripe_count=... osts=a,b,c"; length or -1. */
int iez_layout_format(const struct iez_layout *l, char *out, size_t outlen);
/* Parses the DB's "3 7 11" OST text into l; 0 on success. */
int iez_layout_parse_osts(const char *text, struct iez_layout *l);
int iez_sidecar_append(const char *attr_text, const char *abspath);
int iez_make_dirs(const char *dir);
size_t iez_escape_path(const char *path, char *out, size_t outlen);

/* ---- Lustre (lustre.c) ------------------------------------------------- */
int iez_is_lustre_dir(const char *abspath_of_file);
/* Fills buf with a lov_user_md_v3 (LOV_USER_MAGIC_SPECIFIC); size or -1. */
long iez_lustre_build_lum(const struct iez_layout *l, void *buf, size_t buflen);
int iez_lustre_setstripe(int fd, const struct iez_layout *l);
int iez_lustre_getstripe(int fd, int *stripe_count, uint64_t *stripe_size);

/* ---- interaction DB (db.c, db_sqlite.c, db_mariadb.c) ------------------ */
enum { IEZ_LOOKUP_ERROR = -1, IEZ_LOOKUP_MISSING = 0, IEZ_LOOKUP_FOUND = 1 };
int iez_db_lookup(const char *abspath, struct iez_layout *out);
void iez_db_atfork_prepare(void);
void iez_db_atfork_parent(void);
void iez_db_atfork_child(void);

struct iez_mysql_url {
    char user[128], password[128], host[256], db[128];
    unsigned port;
};
int iez_parse_mysql_url(const char *url, struct iez_mysql_url *out);
int iez_db_is_mysql(const char *db);

struct iez_backend {
    const char *name;
    void *(*connect)(const struct iez_config *cfg, double deadline);
    int (*lookup)(void *conn, const char *abspath, struct iez_layout *out, double deadline);
    void (*abandon)(void *conn); /* child after fork: forget without closing */
};
extern const struct iez_backend iez_sqlite_backend;
extern const struct iez_backend iez_mariadb_backend;

/* ---- placement (place.c) ----------------------------------------------- */
struct iez_created {
    int created;
    dev_t dev;
    ino_t ino;
};
/* Before a call that may create (dirfd, path): place the file if it is new
 * and has an allocation. On return c->created says whether iez created it;
 * errno is preserved. */
void iez_place_before(int dirfd, const char *path, unsigned mode, struct iez_created *c);
/* Set while an MPI-IO or HDF5 call that iez already placed runs: its inner opens skip the lookup. */
extern IEZ_TLS int iez_decided;
/* After the application's call failed although iez created the file: remove it. */
void iez_place_undo(int dirfd, const char *path, const struct iez_created *c);

/* ---- counters and reports (report.c) ----------------------------------- */
void iez_count_hit(void);
void iez_count_miss(void);
void iez_count_error(void);
void iez_report_flush(void); /* at exit: counts file, and the trace in trace mode */
void iez_report_before_exec(void); /* exec replaces the process: write what it has now */
void iez_report_exec_failed(void); /* ... and start afresh if the exec did not happen */
/* The process that owns libiez's state: a vfork() child shares the parent's
 * memory but runs no atfork handler, so it must not touch that state. */
extern pid_t iez_owner_pid;
int iez_is_owner(void);
int iez_csv_field(char *out, size_t outlen, const char *field);
void iez_rank(int *rank, int *size);
void iez_mpi_set_rank(int rank, int size);

/* ---- tracing (trace.c) ------------------------------------------------- */
void iez_trace_opened(int dirfd, const char *path, int fd, int flags);
void iez_trace_opened_file(const char *path, FILE *fp, const char *mode);
/* The write hot path, inlined into every write interposer: one load when not tracing; when
 * tracing, the descriptor's record (if any) gets the bytes with one atomic add. */
struct iez_record_bytes { uint64_t bytes; };
extern void **iez_fd_records;   /* fd -> record; a record starts with its byte counter */
extern size_t iez_fd_records_len;
static inline void iez_count_write(int fd, ssize_t n)
{
    void **table = __atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    if (__builtin_expect(table == 0, 1) || n <= 0 || (size_t)(unsigned)fd >= iez_fd_records_len)
        return;
    struct iez_record_bytes *r = __atomic_load_n(&table[fd], __ATOMIC_ACQUIRE);
    if (r && !iez_in_mpi_write && !iez_busy)
        __atomic_add_fetch(&r->bytes, (uint64_t)n, __ATOMIC_RELAXED);
}
void iez_trace_closing(int fd);
void *iez_trace_detach(int fd);
void iez_trace_size_by_path(void *record);
void iez_report_atfork_child(void);
void *iez_trace_record_for(const char *abspath);
void iez_trace_add_bytes(void *record, uint64_t bytes);
int iez_trace_write_csv(int fd);
int iez_trace_has_records(void);
void iez_trace_atfork_child(void);
void iez_trace_forget_written(void);

#endif
