/* Configuration from the environment, read once on first use (which may be
 * before main, from another library's constructor). */
#include "iez.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct iez_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

static const char *const default_excludes[] = {
    "/proc", "/sys", "/dev", "/run", "/var/run", "/usr", "/etc", "/boot",
    "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", NULL,
};

double iez_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Deadlines: a clock that no one sets. */
double iez_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void copy(char *dst, size_t len, const char *src)
{
    if (!src)
        src = "";
    size_t n = strlen(src);
    if (n >= len)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Splits a colon-separated prefix list into normalised absolute prefixes. */
static char **prefix_list(const char *text, const char *const *extra, const char *more[], int nmore)
{
    size_t n = 0, cap = 8;
    char **out = calloc(cap, sizeof *out);
    if (!out)
        return NULL;
    for (const char *const *e = extra; e && *e; e++) {
        if (n + 2 >= cap) {
            char **grown = realloc(out, (cap *= 2) * sizeof *out);
            if (!grown)
                return out;
            out = grown;
        }
        out[n++] = strdup(*e);
        out[n] = NULL;
    }
    for (int i = 0; i < nmore; i++) {
        if (!more[i] || !*more[i])
            continue;
        if (n + 2 >= cap) {
            char **grown = realloc(out, (cap *= 2) * sizeof *out);
            if (!grown)
                return out;
            out = grown;
        }
        out[n++] = strdup(more[i]);
        out[n] = NULL;
    }
    if (text) {
        char *copy_text = strdup(text);
        char *save = NULL;
        for (char *tok = copy_text ? strtok_r(copy_text, ":", &save) : NULL; tok; tok = strtok_r(NULL, ":", &save)) {
            char abs[IEZ_PATH_MAX];
            if (iez_abspath(-100 /* AT_FDCWD */, tok, abs, sizeof abs) != 0)
                continue;
            if (n + 2 >= cap) {
                char **grown = realloc(out, (cap *= 2) * sizeof *out);
                if (!grown)
                    break;
                out = grown;
            }
            out[n++] = strdup(abs);
            out[n] = NULL;
        }
        free(copy_text);
    }
    return out;
}

static void init(void)
{
    int saved = errno;
    cfg.started = iez_now();
    cfg.debug = env("IEZ_DEBUG") && strcmp(env("IEZ_DEBUG"), "0") != 0;
    const char *mode = env("IEZ_MODE");
    if (!mode || !strcmp(mode, "place"))
        cfg.mode = IEZ_MODE_PLACE;
    else if (!strcmp(mode, "trace"))
        cfg.mode = IEZ_MODE_TRACE;
    else
        cfg.mode = IEZ_MODE_OFF; /* "off" and anything unknown: never guess */
    if (mode && cfg.mode == IEZ_MODE_OFF && strcmp(mode, "off") != 0)
        iez_debug("IEZ_MODE=%s is not place, trace or off: libiez stays off", mode);

    cfg.timeout_ms = 100;
    if (env("IEZ_TIMEOUT_MS")) {
        long t = strtol(env("IEZ_TIMEOUT_MS"), NULL, 10);
        if (t > 0 && t < 600000)
            cfg.timeout_ms = (int)t;
    }
    cfg.default_stripe_count = 1;
    if (env("IEZ_DEFAULT_STRIPE_COUNT")) {
        long c = strtol(env("IEZ_DEFAULT_STRIPE_COUNT"), NULL, 10);
        if (c >= 1 && c <= IEZ_MAX_STRIPES)
            cfg.default_stripe_count = (int)c;
    }

    if (env("IEZ_STATE_DIR"))
        iez_abspath(-100, env("IEZ_STATE_DIR"), cfg.state_dir, sizeof cfg.state_dir);
    else if (env("HOME"))
        snprintf(cfg.state_dir, sizeof cfg.state_dir, "%s/.local/state/iez", env("HOME"));
    else
        copy(cfg.state_dir, sizeof cfg.state_dir, "/tmp/iez-state");
    iez_normalise(cfg.state_dir);

    if (env("IEZ_TRACE_DIR"))
        iez_abspath(-100, env("IEZ_TRACE_DIR"), cfg.trace_dir, sizeof cfg.trace_dir);

    if (env("IEZ_DB"))
        copy(cfg.db, sizeof cfg.db, env("IEZ_DB"));
    else
        snprintf(cfg.db, sizeof cfg.db, "%s/iez.db", cfg.state_dir);
    if (!iez_db_is_mysql(cfg.db)) {
        const char *file = cfg.db;
        if (!strncmp(file, "sqlite:///", 10))
            file += 10; /* as SQLAlchemy reads it: sqlite:////abs -> /abs, sqlite:///rel -> rel (relative) */
        iez_abspath(-100, file, cfg.db_file, sizeof cfg.db_file);
    }

    copy(cfg.xattr_name, sizeof cfg.xattr_name, env("IEZ_LAYOUT_XATTR") ? env("IEZ_LAYOUT_XATTR") : "user.iez.layout");

    if (env("IEZ_APP")) {
        copy(cfg.app, sizeof cfg.app, env("IEZ_APP"));
    } else {
        char exe[IEZ_PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
        const char *base = strrchr(exe, '/');
        copy(cfg.app, sizeof cfg.app, base ? base + 1 : exe);
    }
    const char *job = env("IEZ_RUN_ID");
    if (!job) job = env("SLURM_JOB_ID");
    if (!job) job = env("PBS_JOBID");
    if (!job) job = env("LSB_JOBID");
    if (!job) job = env("FLUX_JOB_ID");
    copy(cfg.job, sizeof cfg.job, job);
    if (gethostname(cfg.host, sizeof cfg.host - 1) != 0)
        copy(cfg.host, sizeof cfg.host, "unknown");

    const char *own[] = { cfg.state_dir, cfg.trace_dir, cfg.db_file };
    cfg.exclude = prefix_list(env("IEZ_EXCLUDE"), NULL, own, 3);
    cfg.include = env("IEZ_INCLUDE") ? prefix_list(env("IEZ_INCLUDE"), NULL, NULL, 0) : NULL;
    /* IEZ_MAP (map.c): mapped now, once, so that no lookup ever opens anything */
    if (env("IEZ_MAP") && iez_abspath(-100, env("IEZ_MAP"), cfg.map, sizeof cfg.map) == 0 &&
        cfg.mode == IEZ_MODE_PLACE)
        iez_map_load(cfg.map);
    errno = saved;
}

const struct iez_config *iez_cfg(void)
{
    pthread_once(&cfg_once, init);
    return &cfg;
}

int iez_path_considered(const char *abspath)
{
    /* IEZ_INCLUDE names the file systems iez manages and replaces the system
     * defaults; IEZ_EXCLUDE and libiez's own files are always left out. */
    const struct iez_config *c = iez_cfg();
    if (c->include) {
        int inside = 0;
        for (char **p = c->include; *p; p++)
            if (iez_has_prefix(abspath, *p)) {
                inside = 1;
                break;
            }
        if (!inside)
            return 0;
    } else {
        for (const char *const *p = default_excludes; *p; p++)
            if (iez_has_prefix(abspath, *p))
                return 0;
    }
    for (char **p = c->exclude; p && *p; p++)
        if (iez_has_prefix(abspath, *p))
            return 0;
    /* nor the files SQLite keeps beside the interaction DB: a program writing the DB itself makes them */
    size_t n = strlen(c->db_file);
    if (n && !strncmp(abspath, c->db_file, n) &&
        (!strcmp(abspath + n, "-wal") || !strcmp(abspath + n, "-shm") || !strcmp(abspath + n, "-journal")))
        return 0;
    return 1;
}

struct debug_args {
    const char *fmt;
    va_list ap;
};

static void debug_line(void *p)
{
    struct debug_args *a = p;
    char line[1024];
    int n = snprintf(line, sizeof line, "iez[%d]: ", (int)getpid());
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, a->fmt, a->ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + ((size_t)m < sizeof line - (size_t)n - 1 ? (size_t)m : sizeof line - (size_t)n - 2);
    line[len++] = '\n';
    iez_sys_write(2, line, len);
}

void iez_debug(const char *fmt, ...)
{
    /* cfg.started is set first thing in init(): before that, ask the environment. */
    if (cfg.started > 0 ? !cfg.debug : !(getenv("IEZ_DEBUG") && strcmp(getenv("IEZ_DEBUG"), "0") != 0))
        return;
    int saved = errno;
    struct debug_args a = { .fmt = fmt };
    va_start(a.ap, fmt);
    iez_on_stack(debug_line, &a); /* the line and vsnprintf take ~3 KiB: never the caller's stack */
    va_end(a.ap);
    errno = saved;
}
