/* The lookup: one connection per process, behind one mutex, opened on the
 * first create. Any failure (no DB, corrupt, locked past the time-out, server
 * down) disables lookups for the rest of the process: a job that cannot reach
 * the DB must not pay the time-out on each of its files. Waiting for the
 * mutex counts against the create's own deadline, and a wait that runs out
 * fails that create only. A MariaDB query the server did not answer by the
 * deadline (a locked table, a loaded server) fails that create only too: the
 * connection it left mid-query is dropped, and a later lookup connects again
 * once a back-off has passed (cut_off below); a new connection that fails is
 * the server down, as above.
 *
 * Where a DB client cannot run safely, there is no direct lookup (an error,
 * the plain call; a layout map still answers): a MariaDB lookup in a signal
 * handler (signals.c: it may have interrupted malloc, which Connector/C
 * calls), any lookup in a vfork() child (it shares
 * the parent's memory, so the parent's connection state), and in the child of
 * a fork() taken while other threads ran (one of them may have held a lock of
 * SQLite's, of the resolver's or of the connector's, which the child would
 * wait for forever). */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int iez_db_connect_late;
const char *iez_db_watched;  /* the SQLite DB's base name while libiez's connection is open, else NULL */

/* The module's state; out of it, what the other modules read (iez.h). */
static struct {
    pthread_mutex_t lock;
    dev_t watched_dev;           /* the file of iez_db_watched */
    ino_t watched_ino;
    const struct iez_backend *backend;
    void *conn;
    int disabled;
    const char *off_why;         /* why a fork child makes no direct lookup, NULL when it may */
    int fork_locked;             /* the fork handler holds the lock */
    int fork_threads;            /* threads of the forking process, -1 unknown */
    pthread_mutex_t q_lock;      /* the queue of threads waiting for the lock (below) */
    struct db_request *q_head, *q_tail;
    double retry_at;             /* MariaDB: no new connection before (iez_mono) after a cut-off query, 0: none */
    double backoff;              /* the last back-off, seconds; 0 after a lookup the server answered */
} db_state = { .lock = PTHREAD_MUTEX_INITIALIZER, .q_lock = PTHREAD_MUTEX_INITIALIZER };

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies [s, e) into out, decoding %XX as URLs do; -1 when it does not fit. */
static int take(const char *s, const char *e, char *out, size_t outlen)
{
    size_t n = 0;
    while (s < e) {
        char c = *s++;
        if (c == '%' && e - s >= 2 && hexval(s[0]) >= 0 && hexval(s[1]) >= 0) {
            c = (char)(hexval(s[0]) * 16 + hexval(s[1]));
            s += 2;
        }
        if (n + 1 >= outlen)
            return -1;
        out[n++] = c;
    }
    out[n] = '\0';
    return 0;
}

int iez_parse_mysql_url(const char *url, struct iez_mysql_url *u)
{
    memset(u, 0, sizeof *u);
    if (!iez_db_is_mysql(url))
        return -1;
    const char *p = strstr(url, "://") + 3;
    const char *slash = strchr(p, '/');
    if (!slash)
        return -1;
    const char *at = memchr(p, '@', (size_t)(slash - p));
    const char *hostpart = p;
    if (at) {
        /* the last '@' before the path ends the credentials */
        for (const char *q = at; q < slash; q++)
            if (*q == '@')
                at = q;
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (take(p, colon ? colon : at, u->user, sizeof u->user) ||
            (colon && take(colon + 1, at, u->password, sizeof u->password)))
            return -1;
        hostpart = at + 1;
    }
    const char *colon = memchr(hostpart, ':', (size_t)(slash - hostpart));
    if (take(hostpart, colon ? colon : slash, u->host, sizeof u->host))
        return -1;
    if (colon) {
        char *end;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (end != slash || port == 0 || port > 65535)
            return -1;
        u->port = (unsigned)port;
    }
    const char *q = strchr(slash + 1, '?');
    if (take(slash + 1, q ? q : slash + 1 + strlen(slash + 1), u->db, sizeof u->db) || !u->db[0])
        return -1;
    if (!u->host[0])
        strcpy(u->host, "localhost");
    return 0;
}

int iez_db_row(const char *abspath, long long stripe_size, int stripe_count, const char *osts, const char *layout,
               const char *default_layout, struct iez_alloc *out)
{
    out->has_default = default_layout != NULL;
    out->default_layout[0] = '\0';
    if (default_layout) {
        size_t n = strlen(default_layout);
        if (n >= sizeof out->default_layout) {
            iez_debug("the DB row for %s is malformed (default_layout of %zu bytes)", abspath, n);
            return IEZ_LOOKUP_ERROR;
        }
        memcpy(out->default_layout, default_layout, n + 1);
    }
    struct iez_layout *l = &out->layout;
    if (layout) {
        /* a layout with a pool or components: the version-2 text is the whole truth */
        if (iez_layout_parse(layout, strlen(layout), l) == 0) {
            /* a mirrored (FLR) layout is applied for a write: it goes to the first mirror and the others are
             * stale until a resync (lfs mirror resync, iez copy), as Lustre marks them */
            iez_layout_mark_written(l);
            return IEZ_LOOKUP_FOUND;
        }
        iez_debug("the DB row for %s is malformed (layout '%.200s')", abspath, layout);
        return IEZ_LOOKUP_ERROR;
    }
    l->ncomps = l->nosts = 0;
    l->stripe_size = stripe_size > 0 ? (uint64_t)stripe_size : 0;
    l->stripe_count = stripe_count;
    if (stripe_size > 0 && stripe_count >= 1 && stripe_count <= IEZ_MAX_STRIPES && osts &&
        iez_layout_parse_osts(osts, l) == 0)
        return IEZ_LOOKUP_FOUND;
    iez_debug("the DB row for %s is malformed (stripe_size %lld, stripe_count %d, osts '%.200s')", abspath,
              stripe_size, stripe_count, osts ? osts : "");
    return IEZ_LOOKUP_ERROR;
}

static const struct iez_backend *choose(const struct iez_config *c)
{
    return iez_db_is_mysql(c->db) ? &iez_mariadb_backend : &iez_sqlite_backend;
}

/* mysql://, mariadb://, and SQLAlchemy's mysql+driver:// and mariadb+driver:// forms. */
int iez_db_is_mysql(const char *db)
{
    const char *rest;
    if (!strncmp(db, "mysql", 5))
        rest = db + 5;
    else if (!strncmp(db, "mariadb", 7))
        rest = db + 7;
    else
        return 0;
    if (*rest == '+')
        rest += strcspn(rest, ":/");
    return !strncmp(rest, "://", 3);
}

/* This thread's CPU time, seconds. */
static double thread_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int lock_until(double deadline)
{
    double left = deadline - iez_mono();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (left < 0)
        left = 0;
    long long ns = (long long)ts.tv_nsec + (long long)(left * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return pthread_mutex_clocklock(&db_state.lock, CLOCK_MONOTONIC, &ts);
}

int iez_db_lookup(const char *abspath, struct iez_alloc *out)
{
    return iez_db_lookup_until(abspath, out, iez_mono() + iez_cfg()->timeout_ms / 1000.0);
}

/* ---- lookups behind db_state.lock, served by whichever thread holds it ---------------------------------
 * One connection per process serves every thread, one lookup at a time. Taking turns on a mutex made
 * many threads at once lose their creates' time to each other (the lock went to whichever thread the
 * scheduler ran next, a waiter had to be woken and run for every single lookup): with 64 threads x 50
 * creates on 2 cores, hundreds of creates ran out of IEZ_TIMEOUT_MS waiting. So a thread that finds
 * the lock taken queues its lookup (path, output, deadline) and sleeps; the holder, after its own,
 * makes the queued ones in order within its own create's deadline, hands each its result, and
 * when it stops wakes the first one still queued, which takes the lock and goes on. A queued lookup
 * whose deadline passes is withdrawn (an error for that create only, as before); one being made is
 * waited for (the holder makes it within that same deadline). Every release of db_state.lock goes through
 * db_unlock, under db_state.q_lock, so a queued thread is never left asleep with the lock free. */
struct db_request {
    const char *abspath;
    struct iez_alloc *out;
    double deadline;
    int state, rc;
    pthread_cond_t wake; /* signalled under db_state.q_lock: done, or the lock may be free */
    struct db_request *next;
};
enum { REQ_QUEUED, REQ_TAKEN, REQ_DONE };

/* Under db_state.q_lock. */
static void dequeue(struct db_request *r)
{
    struct db_request **at = &db_state.q_head, *prev = NULL;
    while (*at && *at != r) {
        prev = *at;
        at = &(*at)->next;
    }
    if (!*at)
        return;
    *at = r->next;
    if (db_state.q_tail == r)
        db_state.q_tail = prev;
    r->next = NULL;
}

static void db_unlock(void)
{
    pthread_mutex_lock(&db_state.q_lock);
    if (db_state.q_head)
        pthread_cond_signal(&db_state.q_head->wake); /* it takes the lock over */
    pthread_mutex_unlock(&db_state.lock);
    pthread_mutex_unlock(&db_state.q_lock);
}

static int lookup_locked(const struct iez_config *c, const char *abspath, struct iez_alloc *out, double deadline);

/* The most a back-off grows to, in IEZ_TIMEOUT_MS: a server that stays slow costs a process one
 * IEZ_TIMEOUT_MS wait per 64 (under 2 % of a loop of creates), its other creates errors at once. */
#define IEZ_BACKOFF_MAX 64

/* A MariaDB query cut off by the create's deadline: the server accepted the connection and the query but did
 * not answer in time. The connection, mid-query, cannot be used again: it is closed and freed, this create
 * is an error, and lookups stay on. When the server had at least half of IEZ_TIMEOUT_MS for the query (asked
 * at `asked`), the next new connection waits for a back-off from now - IEZ_TIMEOUT_MS, doubled at each such
 * cut-off in a row up to IEZ_BACKOFF_MAX times it, back to none once the server answers - and the lookups
 * before it are errors without a wait; a query left less time (the create's went to waiting for other
 * threads' lookups) is no sign of a slow server: the next lookup connects at once. db_state.lock held. */
static void cut_off(const struct iez_config *c, const char *abspath, double asked, double deadline)
{
    db_state.backend->discard(db_state.conn);
    db_state.conn = NULL;
    double unit = c->timeout_ms / 1000.0;
    if (deadline - asked < unit / 2) {
        iez_debug("lookup of %s: the query had %.1f ms of the create's IEZ_TIMEOUT_MS left: this create only; "
                  "the connection is dropped, the next lookup connects again", abspath, (deadline - asked) * 1e3);
        return;
    }
    db_state.backoff = db_state.backoff > 0 ? 2 * db_state.backoff : unit;
    if (db_state.backoff > IEZ_BACKOFF_MAX * unit)
        db_state.backoff = IEZ_BACKOFF_MAX * unit;
    db_state.retry_at = iez_mono() + db_state.backoff;
    iez_debug("lookup of %s: the server did not answer within the create's IEZ_TIMEOUT_MS: this create only; "
              "the connection is dropped, no new one for %.0f ms", abspath, db_state.backoff * 1e3);
}

/* The connection was made (once per process): the lookups queued meanwhile waited for it, not for other
 * threads' lookups, and get that time back. Called with db_state.lock held. */
static void extend_queued(double took)
{
    pthread_mutex_lock(&db_state.q_lock);
    for (struct db_request *r = db_state.q_head; r; r = r->next)
        r->deadline += took;
    pthread_mutex_unlock(&db_state.q_lock);
}

/* The holder of db_state.lock: the queued lookups while its own create's deadline allows; then db_state.lock goes. */
static void serve_queue(const struct iez_config *c, double own_deadline)
{
    pthread_mutex_lock(&db_state.q_lock);
    while (db_state.q_head && iez_mono() < own_deadline) {
        struct db_request *r = db_state.q_head;
        dequeue(r);
        r->state = REQ_TAKEN;
        pthread_mutex_unlock(&db_state.q_lock);
        /* within both creates' deadlines: the holder's own call returns by its IEZ_TIMEOUT_MS too */
        int rc = lookup_locked(c, r->abspath, r->out, r->deadline < own_deadline ? r->deadline : own_deadline);
        pthread_mutex_lock(&db_state.q_lock);
        r->rc = rc;
        r->state = REQ_DONE;
        pthread_cond_signal(&r->wake);
    }
    if (db_state.q_head)
        pthread_cond_signal(&db_state.q_head->wake);
    pthread_mutex_unlock(&db_state.lock);
    pthread_mutex_unlock(&db_state.q_lock);
}

int iez_db_lookup_until(const char *abspath, struct iez_alloc *out, double deadline)
{
    const struct iez_config *c = iez_cfg();
    int from_map = iez_map_lookup(abspath, out); /* IEZ_MAP first: no lock, no allocation (map.c) */
    if (from_map != IEZ_MAP_NONE)
        return from_map;
    if (__atomic_load_n(&db_state.disabled, __ATOMIC_RELAXED))
        return IEZ_LOOKUP_ERROR;
    if (!iez_is_owner()) {
        /* a vfork() child: the parent's memory, the parent's connection, another descriptor table */
        iez_debug("no DB lookup of %s in a vfork() child (a layout map would answer)", abspath);
        return IEZ_LOOKUP_ERROR;
    }
    if (iez_in_handler && iez_db_is_mysql(c->db)) {
        /* the handler may have interrupted its thread inside malloc or free, which Connector/C calls */
        iez_debug("no MariaDB lookup of %s in a signal handler (a layout map or SQLite would answer)", abspath);
        return IEZ_LOOKUP_ERROR;
    }
    if (pthread_mutex_trylock(&db_state.lock) != 0) {
        struct db_request me = { abspath, out, deadline, REQ_QUEUED, IEZ_LOOKUP_ERROR, PTHREAD_COND_INITIALIZER,
                                 NULL };
        pthread_mutex_lock(&db_state.q_lock);
        if (db_state.q_tail)
            db_state.q_tail->next = &me;
        else
            db_state.q_head = &me;
        db_state.q_tail = &me;
        int holder = 0;
        for (;;) {
            if (me.state == REQ_DONE)
                break;
            if (me.state == REQ_QUEUED && pthread_mutex_trylock(&db_state.lock) == 0) {
                dequeue(&me);
                holder = 1;
                deadline = me.deadline; /* moved on by a connection made meanwhile */
                break;
            }
            double now = iez_mono();
            if (me.state == REQ_QUEUED && now >= me.deadline) {
                dequeue(&me);
                if (db_state.q_head)
                    pthread_cond_signal(&db_state.q_head->wake); /* in case this one was woken to take the lock */
                break;
            }
            /* queued: until the deadline; being made: the holder finishes it within that deadline */
            double until = me.state == REQ_QUEUED ? me.deadline : now + 0.01;
            struct timespec ts = { (time_t)until, (long)((until - (double)(time_t)until) * 1e9) };
            pthread_cond_clockwait(&me.wake, &db_state.q_lock, CLOCK_MONOTONIC, &ts);
        }
        pthread_mutex_unlock(&db_state.q_lock);
        pthread_cond_destroy(&me.wake);
        if (!holder) {
            if (me.state != REQ_DONE)
                iez_debug("lookup of %s: other threads' lookups took the create's IEZ_TIMEOUT_MS", abspath);
            return me.rc; /* an error for this create only when withdrawn: the DB itself answers */
        }
    }
    int rc = lookup_locked(c, abspath, out, deadline);
    serve_queue(c, deadline);
    return rc;
}

/* One lookup, db_state.lock held. */
static int lookup_locked(const struct iez_config *c, const char *abspath, struct iez_alloc *out, double deadline)
{
    int rc = IEZ_LOOKUP_ERROR;
    iez_hide_fds++;
    if (db_state.disabled)
        goto out;
    /* when the lock came, how much of this create's time the DB itself gets (issue 31 item 7) */
    double got = iez_mono();
    if (got >= deadline) {
        iez_debug("lookup of %s: other threads' lookups took the create's IEZ_TIMEOUT_MS", abspath);
        goto out; /* this create only: the DB was not even asked */
    }
    if (db_state.off_why) {
        iez_debug("no DB lookups in this process: %s (a layout map would answer)", db_state.off_why);
        db_state.disabled = 1;
        goto out;
    }
    if (!db_state.backend)
        db_state.backend = choose(c);
    if (!db_state.backend->connect) {
        iez_debug("IEZ_DB=%s needs the %s backend, which this libiez was built without", c->db, db_state.backend->name);
        db_state.disabled = 1;
        goto out;
    }
    if (db_state.conn && !iez_fds_intact()) {
        /* the application closed or replaced a descriptor of the connection (close_range, dup2):
         * forgotten without a call on it, so nothing touches what is now the application's */
        db_state.conn = NULL;
        iez_fd_forget_all();
        if (db_state.backend == &iez_sqlite_backend) {
            /* SQLite keeps per-file state for the whole process (locks, the WAL index and their
             * descriptors): a new connection to the same file would use the lost ones */
            iez_debug("the SQLite connection lost its descriptors: lookups are off for this process");
            db_state.disabled = 1;
            goto out;
        }
    }
    if (!db_state.conn && db_state.retry_at > 0 && got < db_state.retry_at) {
        iez_debug("lookup of %s: within the back-off after a cut-off MariaDB query (%.0f ms more): this create only",
                  abspath, (db_state.retry_at - got) * 1e3);
        goto out;
    }
    if (!db_state.conn) {
        double cpu = thread_cpu(), began = iez_mono();
        iez_db_connect_late = 0;
        db_state.conn = db_state.backend->connect(c, deadline);
        int late = !db_state.conn && iez_db_connect_late && thread_cpu() - cpu < c->timeout_ms / 2000.0;
        if (db_state.conn || late)
            extend_queued(iez_mono() - began); /* the queued lookups waited for the connection, not for lookups */
        if (late) {
            /* SQLite's first read of the schema stopped at the deadline, having used less than half of
             * IEZ_TIMEOUT_MS of this thread's time (waiting, a loaded machine): this create only, the
             * next one connects again. Several processes opening the DB at once on a loaded machine
             * switched lookups off for whole processes here. */
            iez_debug("connecting to %s ran out of the create's IEZ_TIMEOUT_MS: this create only", c->db);
            goto out;
        }
        if (!db_state.conn) {
            iez_debug("cannot use the interaction DB %s: lookups are off for this process", c->db);
            db_state.disabled = 1;
            goto out;
        }
        struct stat st;
        if (db_state.backend == &iez_sqlite_backend && stat(c->db_file, &st) == 0) {
            db_state.watched_dev = st.st_dev;
            db_state.watched_ino = st.st_ino;
            const char *slash = strrchr(c->db_file, '/');
            __atomic_store_n(&iez_db_watched, slash ? slash + 1 : c->db_file, __ATOMIC_RELEASE);
        }
    }
    double cpu = thread_cpu(), asked = iez_mono();
    rc = db_state.backend->lookup(db_state.conn, abspath, out, deadline);
    if (rc == IEZ_LOOKUP_LATE && db_state.backend->discard) {
        cut_off(c, abspath, asked, deadline);
        rc = IEZ_LOOKUP_ERROR;
        goto out;
    }
    if (rc == IEZ_LOOKUP_LATE) {
        rc = IEZ_LOOKUP_ERROR;
        if (thread_cpu() - cpu < c->timeout_ms / 2000.0) {
            /* SQLite stopped at the deadline, having used less than half of IEZ_TIMEOUT_MS of this thread's
             * time: the thread waited (other threads' lookups) or was not run (a loaded machine), the
             * query itself is not slow. This create only; lookups stay on. */
            iez_debug("lookup of %s ran out of the create's IEZ_TIMEOUT_MS (%.1f ms of it in SQLite's work): "
                      "this create only", abspath, (thread_cpu() - cpu) * 1e3);
            goto out;
        }
    }
    if (rc == IEZ_LOOKUP_ERROR && db_state.backend == &iez_mariadb_backend && iez_mono() < deadline) {
        /* The server may have restarted since the last lookup: one new connection, same deadline. */
        db_state.backend->abandon(db_state.conn);
        db_state.conn = db_state.backend->connect(c, deadline);
        asked = iez_mono();
        if (db_state.conn)
            rc = db_state.backend->lookup(db_state.conn, abspath, out, deadline);
        if (rc == IEZ_LOOKUP_LATE) {
            cut_off(c, abspath, asked, deadline);
            rc = IEZ_LOOKUP_ERROR;
            goto out;
        }
    }
    if (rc != IEZ_LOOKUP_ERROR)
        db_state.backoff = db_state.retry_at = 0; /* the server answered */
    if (rc == IEZ_LOOKUP_ERROR && db_state.backend == &iez_sqlite_backend && iez_mono() >= deadline &&
        iez_mono() - got < c->timeout_ms / 1000.0) {
        /* The create's time ran out in SQLite's busy handler (another process's lock), but part of it
         * went to waiting for other threads' lookups: the DB did not itself take IEZ_TIMEOUT_MS, so this
         * create only is an error and lookups stay on (the statement is reset, the connection usable).
         * A MariaDB query cut off at the deadline never gets here (cut_off). */
        iez_debug("lookup of %s ran out of the create's IEZ_TIMEOUT_MS after waiting for other threads' "
                  "lookups: this create only", abspath);
    } else if (rc == IEZ_LOOKUP_ERROR) {
        iez_debug("lookup of %s failed: lookups are off for this process", abspath);
        db_state.disabled = 1;
    }
out:
    iez_hide_fds--;
    return rc;
}

static void release_for_emfile(void *p)
{
    int *released = p;
    if (lock_until(iez_mono() + iez_cfg()->timeout_ms / 1000.0) != 0)
        return;
    if (db_state.conn && iez_fds_in_range() && iez_fds_intact()) {
        iez_hide_fds++;
        db_state.backend->close(db_state.conn);
        iez_hide_fds--;
        db_state.conn = NULL;
        iez_db_watched = NULL;
        iez_fd_forget_all();
        db_state.disabled = 1;
        *released = 1;
        iez_debug("the application ran out of descriptors: the DB connection gave its own back, lookups are off");
    }
    db_unlock();
}

/* The application opened the interaction DB itself (iez's own tools, an administrator's sqlite3):
 * libiez's connection goes, now, before the application takes its first lock. It would behave as
 * another process's (an idle reader of a WAL database keeps the application from leaving WAL
 * mode, which it may do alone in the plain run), and a connection opened later would close
 * descriptors of a file the application has locked. Lookups are off for the process. */
static void step_aside(void *p)
{
    int fd = *(int *)p;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_dev != db_state.watched_dev || st.st_ino != db_state.watched_ino)
        return;
    if (lock_until(iez_mono() + iez_cfg()->timeout_ms / 1000.0) != 0)
        return;
    if (db_state.conn && db_state.backend == &iez_sqlite_backend && iez_fds_intact()) {
        db_state.backend->close(db_state.conn);
        db_state.conn = NULL;
        iez_fd_forget_all();
        db_state.disabled = 1;
        __atomic_store_n(&iez_db_watched, NULL, __ATOMIC_RELEASE);
        iez_debug("the application opened the interaction DB itself: libiez closed its connection, lookups are off");
    }
    db_unlock();
}

void iez_db_app_opened(const char *path, int fd)
{
    const char *name = __atomic_load_n(&iez_db_watched, __ATOMIC_ACQUIRE);
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (!name || !path || strcmp(slash ? slash + 1 : path, name) != 0 || !iez_is_owner())
        return; /* cheap: a name comparison, and a stat only for the DB's own name */
    int saved = errno;
    iez_on_stack(step_aside, &fd);
    errno = saved;
}

int iez_db_release_for_emfile(void)
{
    if (!__atomic_load_n(&db_state.conn, __ATOMIC_RELAXED) || !iez_is_owner())
        return 0;
    int saved = errno, released = 0;
    iez_on_stack(release_for_emfile, &released); /* closing a DB connection: libiez's stack */
    errno = saved;
    return released;
}

/* Threads of this process (/proc/self/task has one entry per thread, plus . and ..); -1 unknown. */
static int count_threads(void)
{
    struct stat st;
    if (stat("/proc/self/task", &st) != 0 || st.st_nlink < 3)
        return -1;
    return (int)st.st_nlink - 2;
}

/* fork(): the child must not share the parent's DB connection (SQLite forbids
 * it; a MariaDB socket would carry both processes' queries), so it forgets it
 * and opens its own on its next create - if that is safe (see the top). The
 * handler waits for a lookup in progress no longer than IEZ_TIMEOUT_MS. */
void iez_db_atfork_prepare(void)
{
    const struct iez_config *c = iez_cfg();
    db_state.fork_threads = 1;
    db_state.fork_locked = 0;
    if (c->mode != IEZ_MODE_PLACE || __atomic_load_n(&db_state.disabled, __ATOMIC_RELAXED))
        return; /* no direct lookup to protect */
    db_state.fork_threads = count_threads();
    db_state.fork_locked = lock_until(iez_mono() + c->timeout_ms / 1000.0) == 0;
}

void iez_db_atfork_parent(void)
{
    if (db_state.fork_locked)
        db_unlock();
}

void iez_db_atfork_child(void)
{
    if (iez_cfg()->mode != IEZ_MODE_PLACE || db_state.disabled)
        return;
    /* queued lookups are other threads', which do not exist here (and one may have held db_state.q_lock) */
    pthread_mutex_init(&db_state.q_lock, NULL);
    db_state.q_head = db_state.q_tail = NULL;
    if (db_state.fork_locked) {
        if (db_state.conn && db_state.backend && db_state.backend->abandon)
            db_state.backend->abandon(db_state.conn);
        pthread_mutex_unlock(&db_state.lock);
    } else {
        /* held by a thread that does not exist here, mid-lookup: nothing behind it can be trusted */
        pthread_mutex_init(&db_state.lock, NULL);
        db_state.off_why = "forked while another thread was looking up";
    }
    db_state.conn = NULL;
    iez_db_watched = NULL;
    if (db_state.backend != &iez_sqlite_backend)
        iez_fd_forget_all(); /* SQLite's stay recorded: its abandon closes them at the next connect */
    if (!db_state.off_why && db_state.fork_threads != 1)
        db_state.off_why = db_state.fork_threads < 0 ? "forked by a process whose threads cannot be counted (no /proc)"
                                   : "forked while other threads ran (SQLite's or the resolver's locks may be held)";
}
