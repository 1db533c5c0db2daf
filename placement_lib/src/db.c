/* The lookup: one connection per process, behind one mutex, opened on the
 * first create. Any failure (no DB, corrupt, locked past the time-out, server
 * down) disables lookups for the rest of the process: a job that cannot reach
 * the DB must not pay the time-out on each of its files. */
#include "iez.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t db_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct iez_backend *backend;
static void *conn;
static int disabled;

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
        if (iez_layout_parse(layout, strlen(layout), l) == 0)
            return IEZ_LOOKUP_FOUND;
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

int iez_db_lookup(const char *abspath, struct iez_alloc *out)
{
    const struct iez_config *c = iez_cfg();
    int from_map = iez_map_lookup(abspath, out); /* IEZ_MAP first: no lock, no allocation (map.c) */
    if (from_map != IEZ_MAP_NONE)
        return from_map;
    if (__atomic_load_n(&disabled, __ATOMIC_RELAXED))
        return IEZ_LOOKUP_ERROR;
    int rc = IEZ_LOOKUP_ERROR;
    pthread_mutex_lock(&db_lock);
    /* The time-out bounds this lookup, not the wait behind other threads' lookups. */
    double deadline = iez_now() + c->timeout_ms / 1000.0;
    if (disabled)
        goto out;
    if (!backend)
        backend = choose(c);
    if (!backend->connect) {
        iez_debug("IEZ_DB=%s needs the %s backend, which this libiez was built without", c->db, backend->name);
        disabled = 1;
        goto out;
    }
    if (!conn) {
        conn = backend->connect(c, deadline);
        if (!conn) {
            iez_debug("cannot use the interaction DB %s: lookups are off for this process", c->db);
            disabled = 1;
            goto out;
        }
    }
    rc = backend->lookup(conn, abspath, out, deadline);
    if (rc == IEZ_LOOKUP_ERROR && backend == &iez_mariadb_backend && iez_now() < deadline) {
        /* The server may have restarted since the last lookup: one new connection, same deadline. */
        backend->abandon(conn);
        conn = backend->connect(c, deadline);
        if (conn)
            rc = backend->lookup(conn, abspath, out, deadline);
    }
    if (rc == IEZ_LOOKUP_ERROR) {
        iez_debug("lookup of %s failed: lookups are off for this process", abspath);
        disabled = 1;
    }
out:
    pthread_mutex_unlock(&db_lock);
    return rc;
}

/* fork(): the child must not share the parent's DB connection (SQLite forbids
 * it; a MariaDB socket would carry both processes' queries), so it forgets it
 * and opens its own on its next create. */
void iez_db_atfork_prepare(void) { pthread_mutex_lock(&db_lock); }
void iez_db_atfork_parent(void) { pthread_mutex_unlock(&db_lock); }
void iez_db_atfork_child(void)
{
    if (conn && backend && backend->abandon)
        backend->abandon(conn);
    conn = NULL;
    pthread_mutex_unlock(&db_lock);
}
