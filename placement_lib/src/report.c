/* What a process leaves behind at exit: its hit, miss, error and skip counts (placement)
 * and its trace (tracing), each written under a temporary name and renamed,
 * so a reader never sees half a file. */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

pid_t iez_owner_pid; /* read by other modules (iez.h) */

/* The module's state: the counts (atomics), the rank MPI gave, this process's trace file while it is
 * written (iez_report_trace_fd). */
static struct {
    unsigned long hits, misses, errors, skips;
    int flushed;
    int mpi_rank, mpi_size;
    char trace_tmp[IEZ_PATH_MAX + 320], trace_final[IEZ_PATH_MAX + 320];
    pid_t trace_pid; /* the process that made trace_tmp: a fork() child makes its own */
} report = { .mpi_rank = -1, .mpi_size = 0 };

int iez_is_owner(void)
{
    return iez_owner_pid == 0 || getpid() == iez_owner_pid;
}

void iez_count_hit(void) { __atomic_add_fetch(&report.hits, 1, __ATOMIC_RELAXED); }
void iez_count_miss(void) { __atomic_add_fetch(&report.misses, 1, __ATOMIC_RELAXED); }
void iez_count_error(void) { __atomic_add_fetch(&report.errors, 1, __ATOMIC_RELAXED); }
void iez_count_skip(void) { __atomic_add_fetch(&report.skips, 1, __ATOMIC_RELAXED); }

void iez_report_atfork_child(void)
{
    report.hits = report.misses = report.errors = report.skips = 0;
    report.flushed = 0;
    iez_owner_pid = getpid();
    report.trace_tmp[0] = '\0'; /* the parent's trace file: the child writes its own */
}

void iez_mpi_set_rank(int rank, int size)
{
    report.mpi_rank = rank;
    report.mpi_size = size;
}

static int env_int(const char *name, int *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 100000000)
        return 0;
    *out = (int)x;
    return 1;
}

void iez_rank(int *rank, int *size)
{
    if (report.mpi_rank >= 0) {
        *rank = report.mpi_rank;
        *size = report.mpi_size;
        return;
    }
    *rank = 0;
    *size = 1;
    static const char *const ranks[] = { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", NULL };
    static const char *const sizes[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL };
    for (const char *const *n = ranks; *n; n++)
        if (env_int(*n, rank))
            break;
    for (const char *const *n = sizes; *n; n++)
        if (env_int(*n, size))
            break;
}

int iez_csv_field(char *out, size_t outlen, const char *field)
{
    int quote = strpbrk(field, ",\"\r\n") != NULL;
    size_t n = 0;
    if (quote && n + 1 < outlen)
        out[n++] = '"';
    for (const char *p = field; *p; p++) {
        if (n + 3 >= outlen)
            return -1;
        if (*p == '"')
            out[n++] = '"';
        out[n++] = *p;
    }
    if (quote)
        out[n++] = '"';
    out[n] = '\0';
    return 0;
}

/* Names dir/<kind>.<host>.<pid>.<ns>.csv and its temporary .<kind>...csv.tmp; 0, or -1 when dir cannot be made. */
static int report_names(const char *dir, const char *kind, char *tmp, char *final, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long ns = (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
    const char *host = iez_cfg()->host;
    if (iez_make_dirs(dir) != 0) {
        iez_debug("cannot create %s for the %s report: %s", dir, kind, strerror(errno));
        return -1;
    }
    snprintf(tmp, len, "%s/.%s.%s.%d.%llu.csv.tmp", dir, kind, host, (int)getpid(), ns);
    snprintf(final, len, "%s/%s.%s.%d.%llu.csv", dir, kind, host, (int)getpid(), ns);
    return 0;
}

/* Renames a complete report to its final name, or removes it. */
static void report_done(int rc, const char *tmp, const char *final)
{
    if (rc == 0 && rename(tmp, final) == 0) {
        iez_debug("wrote %s", final);
    } else {
        iez_debug("cannot write %s: %s", final, strerror(errno));
        unlink(tmp);
    }
}

/* Writes dir/<kind>.<host>.<pid>.<ns>.csv through a temporary name. */
static void write_report(const char *dir, const char *kind, int (*fill)(int fd, void *arg), void *arg)
{
    char tmp[IEZ_PATH_MAX + 320], final[IEZ_PATH_MAX + 320];
    if (report_names(dir, kind, tmp, final, sizeof tmp))
        return;
    int fd = iez_sys_open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        iez_debug("cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    int rc = fill(fd, arg);
    if (iez_sys_close(fd) != 0)
        rc = -1;
    report_done(rc, tmp, final);
}

/* The trace file grows during the run when more files were traced than
 * IEZ_TRACE_MAX_FILES (trace.c writes their rows early) and is completed at
 * exit: one temporary file per process, renamed once. Used under trace.c's lock. */

int iez_report_trace_fd(void)
{
    const struct iez_config *c = iez_cfg();
    int saved = errno;
    int fd = -1;
    if (report.trace_tmp[0] && report.trace_pid == getpid()) {
        fd = iez_sys_open(report.trace_tmp, O_WRONLY | O_APPEND | O_CLOEXEC, 0);
    } else if (c->trace_dir[0] && report_names(c->trace_dir, "iez-trace", report.trace_tmp, report.trace_final,
                                               sizeof report.trace_tmp) == 0) {
        fd = iez_sys_open(report.trace_tmp, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0 && iez_trace_write_header(fd) != 0) {
            iez_sys_close(fd);
            unlink(report.trace_tmp);
            fd = -1;
        }
        if (fd >= 0)
            report.trace_pid = getpid();
        else
            report.trace_tmp[0] = '\0';
    }
    if (fd < 0)
        iez_debug("cannot write the trace %s: %s", report.trace_tmp[0] ? report.trace_tmp : c->trace_dir,
                  c->trace_dir[0] ? strerror(errno) : "IEZ_TRACE_DIR is not set");
    errno = saved;
    return fd;
}

void iez_report_trace_done(int rc)
{
    if (!report.trace_tmp[0] || report.trace_pid != getpid())
        return;
    int saved = errno;
    report_done(rc, report.trace_tmp, report.trace_final);
    report.trace_tmp[0] = '\0';
    errno = saved;
}

static int fill_counts(int fd, void *arg)
{
    (void)arg;
    const struct iez_config *c = iez_cfg();
    char app[600], job[600], host[600], line[2400];
    iez_csv_field(app, sizeof app, c->app);
    iez_csv_field(job, sizeof job, c->job);
    iez_csv_field(host, sizeof host, c->host);
    int rank, size;
    iez_rank(&rank, &size);
    int n = snprintf(line, sizeof line,
                     "app,job,host,pid,rank,hits,misses,errors,started,ended,skips\n"
                     "%s,%s,%s,%d,%d,%lu,%lu,%lu,%.6f,%.6f,%lu\n",
                     app, job, host, (int)getpid(), rank, report.hits, report.misses, report.errors, c->started,
                     iez_now(), report.skips);
    if (n < 0 || (size_t)n >= sizeof line)
        return -1;
    return iez_sys_write(fd, line, (size_t)n) == n ? 0 : -1;
}

void iez_report_before_exec(void)
{
    iez_report_flush();
}

void iez_report_exec_failed(void)
{
    if (!iez_is_owner())
        return;
    /* what was counted is in the report already: the process continues with empty counts */
    __atomic_store_n(&report.hits, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&report.misses, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&report.errors, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&report.skips, 0, __ATOMIC_RELAXED);
    iez_trace_forget_written();
    __atomic_store_n(&report.flushed, 0, __ATOMIC_RELEASE);
}

static void flush(void *unused)
{
    (void)unused;
    const struct iez_config *c = iez_cfg();
    int saved = errno;
    if (c->mode == IEZ_MODE_TRACE) {
        iez_trace_exit_write();   /* err() and error() end in exit(): what they wrote is measured here */
        iez_trace_streams_look(); /* bytes stored in buffers without a call: exit flushes them after this */
    }
    iez_busy++;
    if (report.hits + report.misses + report.errors + report.skips > 0) {
        char dir[IEZ_PATH_MAX + 16];
        if (c->trace_dir[0])
            snprintf(dir, sizeof dir, "%s", c->trace_dir);
        else
            snprintf(dir, sizeof dir, "%s/runs", c->state_dir);
        write_report(dir, "iez-counts", fill_counts, NULL);
    }
    /* a trace file begun during the run is completed even when no record is left in memory */
    if (c->mode == IEZ_MODE_TRACE &&
        (iez_trace_has_records() || (report.trace_tmp[0] && report.trace_pid == getpid()))) {
        if (c->trace_dir[0])
            iez_trace_finish();
        else
            iez_debug("tracing mode needs IEZ_TRACE_DIR: the trace of this process is not written");
    }
    iez_busy--;
    errno = saved;
}

/* At exit, _exit and exec, on whatever thread makes them: the reports are written on libiez's stack. */
void iez_report_flush(void)
{
    if (!iez_is_owner() || __atomic_exchange_n(&report.flushed, 1, __ATOMIC_ACQ_REL) || iez_cfg()->mode == IEZ_MODE_OFF)
        return;
    if (iez_on_stack(flush, NULL) != 0)
        flush(NULL); /* a handler that interrupted libiez exits: as before, on its own stack */
}
