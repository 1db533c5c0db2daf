/* SQLite backend: a read-only connection that never creates the file, with a
 * busy handler and a progress handler holding each lookup to the create's
 * deadline. Its files are opened through libiez's open interposer while
 * iez_hide_fds is set, so they land above the application's range (fds.c). */
#include "iez.h"

#ifdef IEZ_HAVE_SQLITE
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sqlite_conn {
    sqlite3 *db;
    sqlite3_stmt *stmt;
    double deadline;
};

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

static void *sqlite_connect(const struct iez_config *cfg, double deadline)
{
    struct sqlite_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->deadline = deadline;
    iez_busy++;
    int rc = sqlite3_open_v2(cfg->db_file, &c->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_handler(c->db, busy, c);
        sqlite3_progress_handler(c->db, 200, past_deadline, c);
        rc = sqlite3_prepare_v2(c->db,
                                IEZ_PLACEMENTS_QUERY "?1 LIMIT 1",
                                -1, &c->stmt, NULL);
    }
    iez_busy--;
    if (rc != SQLITE_OK) {
        iez_debug("SQLite %s: %s", cfg->db_file, c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        iez_busy++;
        sqlite3_close_v2(c->db);
        iez_busy--;
        free(c);
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
    } else {
        iez_debug("SQLite lookup of %s: %s", abspath, sqlite3_errmsg(sqlite3_db_handle(c->stmt)));
    }
    sqlite3_reset(c->stmt);
    sqlite3_clear_bindings(c->stmt);
    iez_busy--;
    return result;
}

static void sqlite_abandon(void *arg)
{
    (void)arg; /* a connection must not cross fork(): leak it, never close it in the child */
}

static void sqlite_close(void *arg)
{
    struct sqlite_conn *c = arg;
    iez_busy++;
    sqlite3_finalize(c->stmt);
    sqlite3_close_v2(c->db);
    iez_busy--;
    free(c);
}

const struct iez_backend iez_sqlite_backend = { "sqlite", sqlite_connect, sqlite_lookup, sqlite_abandon,
                                                sqlite_close };
#else
const struct iez_backend iez_sqlite_backend = { "sqlite", 0, 0, 0, 0 };
#endif
