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
    char map[IEZ_PATH_MAX];       /* IEZ_MAP made absolute, "" when unset (map.c) */
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

/* ---- system calls that bypass every interposer (real.c; the interposed symbols: real.h) -- */
int iez_sys_open(const char *path, int flags, unsigned mode);   /* libc open, never ours */
int iez_sys_openat(int dirfd, const char *path, int flags, unsigned mode);
int iez_sys_close(int fd);
ssize_t iez_sys_write(int fd, const void *buf, size_t n);

/* ---- never-break helpers (scratch.c, fds.c; README "Signals, fork and descriptors") -- */
/* Runs fn(arg) on this thread's libiez stack, so that the application's stack only ever holds the
 * interposer's own small frame: 0 when it ran, -1 when it could not (no memory, or a signal handler on
 * a sigaltstack interrupted libiez, whose stack is taken): the caller then makes the plain call. */
int iez_on_stack(void (*fn)(void *), void *arg);
/* Per-thread scratch memory, last in first out: the create path never calls malloc. NULL when full. */
void *iez_tmp_alloc(size_t n);
void iez_tmp_free(void *p); /* gives back p and everything handed out after it */
/* Set while the DB clients run: the descriptors they open are moved above the application's range. */
extern IEZ_TLS int iez_hide_fds;
int iez_fd_above(int fd);   /* moved above the application's range, close-on-exec, not recorded */
int iez_fd_hide(int fd);    /* the descriptor that replaces fd (close-on-exec, recorded) */
void iez_fd_forget(int fd); /* the DB client closed it */
void iez_fd_forget_all(void);
int iez_fds_intact(void);   /* 0 when one was closed or now names another file */
int iez_fds_in_range(void); /* 1 when one sits below the soft RLIMIT_NOFILE (it could not be raised) */
int iez_fd_open_elsewhere(dev_t dev, ino_t ino, int except); /* the application has that file open */
/* The application's open failed with EMFILE while the DB connection holds descriptors in its
 * range: the connection is closed and lookups are off; 1 when the call is worth repeating. */
int iez_db_release_for_emfile(void);
/* The application opened path as fd: when that is the SQLite interaction DB, libiez's connection goes
 * (db.c). One load when no SQLite connection is open. */
extern const char *iez_db_watched;
void iez_db_app_opened(const char *path, int fd);
double iez_mono(void);      /* CLOCK_MONOTONIC seconds: every deadline */

/* ---- signal handlers (signals.c) --------------------------------------- */
/* 1 when this thread runs an application's signal handler (installed behind libiez's trampoline): called
 * on the caller's stack, before any switch to libiez's. A handler left by a longjmp is forgotten once the
 * stack is back above it; until then it is taken as running (conservative: a create unplaced, never wrong). */
int iez_signal_running(void);
/* Set for the create under way on this thread when it comes from a signal handler (place.c): no direct
 * MariaDB lookup, whose client allocates with glibc's malloc (db.c). */
extern IEZ_TLS int iez_in_handler;

/* ---- paths (path.c) ---------------------------------------------------- */
/* Absolute, lexically normalised path of (dirfd, path); 0 on success. */
int iez_abspath(int dirfd, const char *path, char *out, size_t outlen);
void iez_normalise(char *path);
int iez_has_prefix(const char *path, const char *prefix);
/* Temporary names (tempname.c): the final name that pattern k of IEZ_TEMP_PATTERNS gives the temporary
 * abspath (same directory) into out; 1 when the pattern matches. */
#define IEZ_TEMP_PATTERNS 5
int iez_temp_final(const char *abspath, int k, char *out, size_t cap);

/* ---- layouts (layout.c) ------------------------------------------------ */
#define IEZ_MAX_COMPS 64          /* components of one composite layout iez reads or applies */
#define IEZ_EOF UINT64_MAX        /* a component's end: the end of the file (Lustre's LUSTRE_EOF) */
#define IEZ_POOL_MAX 15           /* LOV_MAXPOOLNAME */
#define IEZ_TEMPLATE_MAX 8192     /* a canonical template (no OSTs) or a learnt default_layout */

/* One extent of a composite (PFL) layout, or of a template (no OSTs chosen). */
struct iez_comp {
    uint64_t start, end;          /* [start, end); end IEZ_EOF: to the end of the file */
    uint64_t stripe_size;         /* 0: left open ("-") */
    int stripe_count;             /* -1: every OST; 0 for Data-on-MDT */
    int nosts;                    /* 0: not chosen ("-", Lustre chooses), else stripe_count */
    int first_ost;                /* where its OSTs start in iez_layout.osts */
    char pool[IEZ_POOL_MAX + 1];  /* "" when none */
    unsigned char dom, overstripe;
    unsigned char mirror;         /* FLR: the mirror (1, 2, ...) it belongs to; 0 in a layout without mirrors */
    unsigned char mirror_flags;   /* IEZ_MIRROR_PREFER, IEZ_MIRROR_STALE: its mirror's, on each of its components */
};
#define IEZ_MAX_MIRRORS 4         /* iez.model.MAX_MIRRORS */
#define IEZ_MIRROR_PREFER 1       /* the copy reads take (Lustre's LCME_FL_PREF_RD) */
#define IEZ_MIRROR_STALE 2        /* a copy a write left behind until a resync (LCME_FL_STALE) */

/* A layout: plain (ncomps 0: the version-1 text, no pool) or composite
 * (ncomps >= 1: the version-2 text, each component with its own pool). A
 * composite layout's osts hold every component's OSTs in order, and
 * stripe_size/stripe_count its first placed component's. */
struct iez_layout {
    uint64_t stripe_size;
    int stripe_count;
    int ncomps;
    int nosts;                    /* composite: OSTs used in osts */
    int nmirrors;                 /* 0, or 2..IEZ_MAX_MIRRORS: comps hold every mirror's in order (version 3);
                                     stripe_size/stripe_count say the first mirror */
    struct iez_comp comps[IEZ_MAX_COMPS];
    uint32_t osts[IEZ_MAX_STRIPES];
};
/* Version 1 for a plain layout, version 2 otherwise (README "Formats"); length or -1. */
int iez_layout_format(const struct iez_layout *l, char *out, size_t outlen);
/* Version 2 whatever the layout (the trace's layout column; of a mirrored layout, its first mirror);
 * length or -1. */
int iez_layout_format_v2(const struct iez_layout *l, char *out, size_t outlen);
/* The canonical template: version 2 with every component's OSTS "-"; length or -1. */
int iez_layout_template(const struct iez_layout *l, char *out, size_t outlen);
/* A buffer size that holds any of the three texts of l. */
size_t iez_layout_text_cap(const struct iez_layout *l);
/* Marks every mirror but the first stale: what a write leaves behind on an FLR file until a resync. */
void iez_layout_mark_written(struct iez_layout *l);
/* Parses version-1, 2 or 3 text (len bytes, no NUL needed) exactly as
 * iez.layout.emulated.parse_attr does; 0, or -1 for text it would refuse. */
int iez_layout_parse(const char *text, size_t len, struct iez_layout *l);
/* Parses the DB's "3 7 11" OST text into l; 0 on success. */
int iez_layout_parse_osts(const char *text, struct iez_layout *l);
int iez_sidecar_append(const char *attr_text, const char *abspath);
int iez_make_dirs(const char *dir);
size_t iez_escape_path(const char *path, char *out, size_t outlen);
/* The directory holding abspath (lexically); 0 on success. */
int iez_parent_dir(const char *abspath, char *out, size_t outlen);
/* Canonical template text of the default layout of the directory holding
 * abspath, "" when it has none: the emulated attribute, or get-stripe on
 * Lustre. 0 on success; -1 when it cannot be read (errno set); -2 when the
 * directory has a default iez cannot read (malformed text, an unknown Lustre
 * layout). */
int iez_dir_default_template(const char *abspath, int lustre, char *out, size_t outlen);

/* ---- Lustre (lustre.c) ------------------------------------------------- */
int iez_is_lustre_dir(const char *abspath_of_file);
/* Whether /proc/self/mounts listed a Lustre file system when libiez was loaded (1 if unreadable). */
int iez_lustre_mounted(void);
void iez_lustre_scan_mounts(void); /* the constructor's reading (IEZ_ASSUME_LUSTRE=1: as if there were one) */
/* Size of the LL_IOC_LOV_SETSTRIPE buffer for l, or -1 when l cannot be expressed. */
long iez_lustre_lum_size(const struct iez_layout *l);
/* Fills buf with what LL_IOC_LOV_SETSTRIPE takes for l: a lov_user_md_v3
 * (plain, or one component over the whole file) or a lov_comp_md_v1 with one
 * lov_user_md_v3 per component; its size, or -1. */
long iez_lustre_build_lum(const struct iez_layout *l, void *buf, size_t buflen);
int iez_lustre_setstripe(int fd, const struct iez_layout *l);
/* The layout in a buffer LL_IOC_LOV_GETSTRIPE filled (len bytes): 0, or -1
 * for what the text cannot say (foreign, self-extending, unknown magic).
 * with_osts 0 (a directory's default) reads no OST objects. */
int iez_lustre_parse_lum(const void *buf, size_t len, struct iez_layout *l, int with_osts);
/* LL_IOC_LOV_GETSTRIPE on fd (a file, or a directory for its default) into l:
 * 0; -1 with errno (ENODATA: no layout / no default); -2 when unreadable. */
int iez_lustre_getlayout(int fd, struct iez_layout *l, int with_osts);

/* ---- interaction DB (db.c, db_sqlite.c, db_mariadb.c) ------------------ */
/* One row of the placements view. */
struct iez_alloc {
    struct iez_layout layout;     /* the layout column when not NULL, else stripe_size/stripe_count/osts */
    int has_default;              /* default_layout is not NULL: compare before applying */
    char default_layout[IEZ_TEMPLATE_MAX];
};
enum { IEZ_LOOKUP_ERROR = -1, IEZ_LOOKUP_MISSING = 0, IEZ_LOOKUP_FOUND = 1 };
/* a backend's lookup stopped by the create's deadline in the middle of its work (SQLite's progress handler,
 * a MariaDB query the server did not answer in time); db.c makes it IEZ_LOOKUP_ERROR */
#define IEZ_LOOKUP_LATE (-3)
/* set by a backend's connect that failed because the create's deadline passed in the middle of its work */
extern int iez_db_connect_late;
int iez_db_lookup(const char *abspath, struct iez_alloc *out);
/* The same, for a create that must be done by deadline (iez_mono): waiting for other threads' lookups included. */
int iez_db_lookup_until(const char *abspath, struct iez_alloc *out, double deadline);
/* Fills out from a row's columns (NULL for SQL NULL); FOUND or ERROR (malformed, says why). */
int iez_db_row(const char *abspath, long long stripe_size, int stripe_count, const char *osts, const char *layout,
               const char *default_layout, struct iez_alloc *out);
#define IEZ_PLACEMENTS_QUERY \
    "SELECT stripe_size, stripe_count, osts, layout, default_layout FROM placements WHERE path = "
void iez_db_atfork_prepare(void);
void iez_db_atfork_parent(void);
void iez_db_atfork_child(void);

/* ---- layout maps (map.c; README "Layout maps") -------------------------- */
/* IEZ_MAP: a constant database (CDB) of the job's layouts, mapped once at load.
 * A lookup takes no lock, allocates nothing, makes no system call. */
#define IEZ_MAP_NONE (-2)         /* no usable map: ask IEZ_DB */
void iez_map_load(const char *path);
/* FOUND, MISSING (the map is the job's truth), ERROR (malformed value), or IEZ_MAP_NONE. */
int iez_map_lookup(const char *abspath, struct iez_alloc *out);
int iez_map_active(void);
uint32_t iez_map_hash(const void *key, size_t len);
/* 0 when (base, size) is an iez layout map this library reads, else -1 with why. */
int iez_map_check(const void *base, uint64_t size, char *why, size_t whylen);
/* ---- end of layout maps -------------------------------------------------- */

struct iez_mysql_url {
    char user[128], password[128], host[256], db[128];
    unsigned port;
};
int iez_parse_mysql_url(const char *url, struct iez_mysql_url *out);
int iez_db_is_mysql(const char *db);

struct iez_backend {
    const char *name;
    void *(*connect)(const struct iez_config *cfg, double deadline);
    int (*lookup)(void *conn, const char *abspath, struct iez_alloc *out, double deadline);
    void (*abandon)(void *conn); /* child after fork: forget without closing */
    void (*close)(void *conn);   /* its descriptors are intact and libiez's own: give them back */
    /* a connection a lookup cut off by the deadline (IEZ_LOOKUP_LATE) left unusable: closed and freed, its
     * descriptors intact; NULL where a cut-off leaves the connection usable (SQLite) */
    void (*discard)(void *conn);
};
extern const struct iez_backend iez_sqlite_backend;
extern const struct iez_backend iez_mariadb_backend;

/* ---- emulated bandwidth (bandwidth.c; IEZ_EMULATE=ROOT) ------------------ */
extern int iez_bw_on;                 /* a bandwidth table is mapped: I/O on files with a layout is slowed */
void iez_bw_load(const char *root);   /* at load: maps ROOT/bandwidth.shm */
void iez_bw_opened(int fd);           /* a file was opened on fd: keep its emulated layout */
void iez_bw_copied(int oldfd, int newfd);
void iez_bw_forget(int fd);
void iez_bw_forget_range(unsigned first, unsigned last);
int iez_bw_tracked(int fd);           /* fd's I/O is slowed */
uint64_t iez_bw_now(void);            /* CLOCK_MONOTONIC ns when iez_bw_on, else 0 */
/* len bytes at off of fd were read or written, the call having started at started_ns: returns when
 * the emulated OSTs and OSSs would have served them. errno is kept. */
void iez_bw_io(int fd, int64_t off, int64_t len, uint64_t started_ns, int writing);
/* LL_IOC_FLR_SET_MIRROR on an emulated descriptor: its reads and writes go to that copy (0), -1 if it has none. */
int iez_bw_set_mirror(int fd, unsigned long mirror);

/* ---- placement (place.c) ----------------------------------------------- */
struct iez_created {
    int follow;                   /* set by the caller: a dangling link's target may be created (no O_EXCL, no O_NOFOLLOW) */
    int linked;                   /* the file is a dangling link's target: an undo follows the link again */
    int created;
    int sidecar;                  /* its layout went to the sidecar log: an undo says so there too */
    dev_t dev;
    ino_t ino;
};
/* Makes one open of the application's: which, dirfd, path, flags and mode as the application gave them. */
typedef int (*iez_open_call)(int which, int dirfd, const char *path, int flags, unsigned mode);
enum { IEZ_PLACE_PLAIN, IEZ_PLACE_DONE, IEZ_PLACE_PRECREATE };
/* A call that may create (dirfd, path), where no Lustre is mounted: makes the application's call
 * itself with O_EXCL added and, when that created the file, sets its layout on the descriptor.
 * IEZ_PLACE_DONE: *fd (and errno when it is -1) is the application's result. IEZ_PLACE_PLAIN: make
 * the plain call (the file exists, or nothing to do). IEZ_PLACE_PRECREATE: a Lustre client, use
 * iez_place_before. */
int iez_place_open(iez_open_call call, int which, int dirfd, const char *path, int flags, unsigned mode,
                   int *fd);
/* Closes fd, which iez_place_open created at (dirfd, path), and removes that file; errno kept. */
void iez_place_discard(int dirfd, const char *path, int fd);
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
void iez_count_skip(void); /* the directory's default is not the learnt one: plain call */
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
/* A rename that succeeded: the record of from (absolute) now says to, so the row holds the final name. */
void iez_trace_renamed(const char *from, const char *to);
void *iez_trace_detach(int fd);
void iez_trace_size_by_path(void *record);
void iez_report_atfork_child(void);
void *iez_trace_record_for(const char *abspath);
void iez_trace_add_bytes(void *record, uint64_t bytes);
int iez_trace_has_records(void);
/* Descriptors follow their copies (trace_io.c): dup/dup2/dup3/F_DUPFD give newfd oldfd's record. */
void iez_trace_copied(int oldfd, int newfd);
void iez_trace_bind(int fd, void *record);           /* freopen(NULL, ...): the same file on a new descriptor */
void iez_trace_closed_range(unsigned first, unsigned last); /* close_range, closefrom */
int iez_trace_stdio_writes(const char *mode);        /* an fopen mode that may write */
/* Streams (trace_stdio.c): per descriptor, the stream libiez last saw writing it and where its buffer's
 * write pointer was then; what a program stores into the buffer without a call is counted from it. */
struct iez_stream_mark {
    FILE *fp;
    char *ptr;
};
extern struct iez_stream_mark *iez_stream_marks;     /* as long as the descriptor table (trace.c) */
void iez_trace_stream_marked(int fd, FILE *fp);      /* fp was just opened on fd: its buffer holds nothing of ours */
void iez_trace_stream_look(FILE *fp);                /* counts what was stored in fp's buffer since the last look */
void iez_trace_streams_look(void);                   /* the same for every stream a traced descriptor holds (trace.c) */
size_t iez_stream_pending(FILE *fp);                 /* bytes fp's buffer holds for its file (wide: once converted) */
void iez_trace_exit_write(void);                     /* at exit: what err() or error() wrote before calling it */
void iez_trace_stream(int fd, FILE *fp);             /* fdopen: fp writes fd's file (its size at exit) */
/* The trace CSV: its header, and at exit the remaining rows into iez_report_trace_fd's file (then renamed). */
int iez_trace_write_header(int fd);
int iez_trace_finish(void);
int iez_report_trace_fd(void);    /* O_APPEND descriptor on this process's trace file, made with the header; -1 */
void iez_report_trace_done(int rc); /* rc 0: rename it to its final name; else remove it */
void iez_trace_atfork_child(void);
void iez_trace_forget_written(void);

#endif
