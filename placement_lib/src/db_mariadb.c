/* MariaDB backend through Connector/C's non-blocking API, so that connecting
 * and every query obey the create's deadline to the millisecond (the blocking
 * API's time-outs are whole seconds). The connector resolves host names with
 * a blocking getaddrinfo (a DNS server that never answers costs 10 s), so a
 * name is resolved here first, with getaddrinfo_a and the same deadline, and
 * the connector is given the address. mysql_library_init ignores SIGPIPE for
 * the whole process (and everything it execs): the application's disposition
 * is put back at once; the connector sends with MSG_NOSIGNAL and needs none.
 * The connector is libiez's own static copy (Makefile), never the
 * application's: its socket() is libiez's interposer, which moves the socket
 * above the application's range while iez_hide_fds is set (fds.c). */
#include "iez.h"

#ifdef IEZ_HAVE_MARIADB
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <mysql.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t library_once = PTHREAD_ONCE_INIT;
static void library_init(void)
{
    struct sigaction pipe_was;
    int saved = sigaction(SIGPIPE, NULL, &pipe_was) == 0;
    mysql_library_init(0, NULL, NULL);
    if (saved)
        sigaction(SIGPIPE, &pipe_was, NULL); /* no process-wide signal changes */
}

/* One name resolution in flight; left to finish on its own (never freed) when the deadline passes first. */
struct lookup_req {
    struct gaicb cb;
    struct addrinfo hints;
    char name[256];
};

/* The address to give the connector for host: host itself when it is numeric or "localhost"
 * (the connector's Unix socket), else the first address getaddrinfo_a finds by deadline. */
static int resolve(const char *host, char *addr, size_t addrlen, double deadline)
{
    unsigned char bin[sizeof(struct in6_addr)];
    if (!strcmp(host, "localhost") || inet_pton(AF_INET, host, bin) == 1 || inet_pton(AF_INET6, host, bin) == 1) {
        snprintf(addr, addrlen, "%s", host);
        return 0;
    }
    struct lookup_req *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    snprintf(r->name, sizeof r->name, "%s", host);
    r->hints.ai_family = AF_UNSPEC;
    r->hints.ai_socktype = SOCK_STREAM;
    r->cb.ar_name = r->name;
    r->cb.ar_request = &r->hints;
    struct gaicb *list[1] = { &r->cb };
    if (getaddrinfo_a(GAI_NOWAIT, list, 1, NULL) != 0) {
        free(r);
        return -1;
    }
    int err;
    while ((err = gai_error(&r->cb)) == EAI_INPROGRESS) {
        double left = deadline - iez_mono();
        if (left <= 0)
            break;
        struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
        gai_suspend((const struct gaicb *const *)list, 1, &ts);
    }
    if (err == EAI_INPROGRESS) {
        if (gai_cancel(&r->cb) == EAI_CANCELED)
            free(r);
        /* else still running: the resolver's thread writes into r when it is done, so r stays */
        iez_debug("MariaDB host %s: no address within the time-out", host);
        return -1;
    }
    int rc = -1;
    if (err == 0 && r->cb.ar_result) {
        const struct addrinfo *ai = r->cb.ar_result;
        const void *a = ai->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                                                  : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        rc = inet_ntop(ai->ai_family, a, addr, (socklen_t)addrlen) ? 0 : -1;
    } else {
        iez_debug("MariaDB host %s: %s", host, gai_strerror(err));
    }
    if (r->cb.ar_result)
        freeaddrinfo(r->cb.ar_result);
    free(r);
    return rc;
}

/* Waits for what the library asked; returns the events to resume with, or -1 past the deadline. */
static int wait_for(MYSQL *m, int status, double deadline)
{
    struct pollfd pfd = { .fd = (int)mysql_get_socket(m), .events = 0, .revents = 0 };
    if (status & MYSQL_WAIT_READ) pfd.events |= POLLIN;
    if (status & MYSQL_WAIT_WRITE) pfd.events |= POLLOUT;
    if (status & MYSQL_WAIT_EXCEPT) pfd.events |= POLLPRI;
    int rc;
    do {
        /* a signal (the application's timer) interrupts the wait, not the query: wait again, same deadline */
        double left_ms = (deadline - iez_mono()) * 1000.0;
        if (left_ms <= 0)
            return -1;
        int timeout = (int)left_ms + 1;
        if (status & MYSQL_WAIT_TIMEOUT) {
            unsigned lib = mysql_get_timeout_value_ms(m);
            if (lib < (unsigned)timeout)
                timeout = (int)lib;
        }
        rc = poll(&pfd, 1, timeout);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return iez_mono() >= deadline ? -1 : MYSQL_WAIT_TIMEOUT;
    int out = 0;
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) out |= MYSQL_WAIT_READ;
    if (pfd.revents & POLLOUT) out |= MYSQL_WAIT_WRITE;
    if (pfd.revents & POLLPRI) out |= MYSQL_WAIT_EXCEPT;
    return out;
}

static void drop(MYSQL *m)
{
    /* Closing the socket is enough; mysql_close would talk to a server that may not answer. */
    my_socket s = mysql_get_socket(m);
    if ((int)s >= 0) {
        iez_fd_forget((int)s);
        iez_sys_close((int)s);
    }
}

static void *mdb_connect(const struct iez_config *cfg, double deadline)
{
    struct iez_mysql_url u;
    if (iez_parse_mysql_url(cfg->db, &u) != 0) {
        iez_debug("IEZ_DB=%s is not mysql://user[:password]@host[:port]/db", cfg->db);
        return NULL;
    }
    char addr[sizeof u.host];
    if (resolve(u.host, addr, sizeof addr, deadline) != 0)
        return NULL;
    iez_busy++;
    pthread_once(&library_once, library_init);
    MYSQL *m = mysql_init(NULL);
    MYSQL *ret = NULL;
    int ok = 0;
    if (m) {
        unsigned secs = (unsigned)(cfg->timeout_ms + 999) / 1000;
        mysql_options(m, MYSQL_OPT_NONBLOCK, 0);
        mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &secs);
        mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &secs);
        mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &secs);
        int status = mysql_real_connect_start(&ret, m, addr, u.user[0] ? u.user : NULL,
                                              u.password[0] ? u.password : NULL, u.db, u.port, NULL, 0);
        while (status) {
            int ev = wait_for(m, status, deadline);
            if (ev < 0)
                break;
            status = mysql_real_connect_cont(&ret, m, ev);
        }
        if (!status && ret) {
            ok = 1;
            int fd = (int)mysql_get_socket(m);
            if (fd >= 0)
                fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
        } else {
            iez_debug("MariaDB %s:%u: %s", u.host, u.port, status ? "connect timed out" : mysql_error(m));
            drop(m);
        }
    }
    iez_busy--;
    return ok ? m : NULL;
}

static int mdb_lookup(void *arg, const char *abspath, struct iez_alloc *out, double deadline)
{
    MYSQL *m = arg;
    size_t plen = strlen(abspath);
    char *query = malloc(2 * plen + 256);
    if (!query)
        return IEZ_LOOKUP_ERROR;
    int n = snprintf(query, 2 * plen + 256, "%s'", IEZ_PLACEMENTS_QUERY);
    n += (int)mysql_real_escape_string(m, query + n, abspath, (unsigned long)plen);
    n += snprintf(query + n, 2 * plen + 256 - (size_t)n, "' LIMIT 1");

    int result = IEZ_LOOKUP_ERROR, err = 0;
    MYSQL_RES *res = NULL;
    iez_busy++;
    int status = mysql_real_query_start(&err, m, query, (unsigned long)n);
    while (status) {
        int ev = wait_for(m, status, deadline);
        if (ev < 0)
            goto done;
        status = mysql_real_query_cont(&err, m, ev);
    }
    if (err) {
        iez_debug("MariaDB lookup of %s: %s", abspath, mysql_error(m));
        goto done;
    }
    status = mysql_store_result_start(&res, m);
    while (status) {
        int ev = wait_for(m, status, deadline);
        if (ev < 0)
            goto done;
        status = mysql_store_result_cont(&res, m, ev);
    }
    if (!res)
        goto done;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (!row) {
        result = IEZ_LOOKUP_MISSING;
    } else {
        long long size = row[0] ? strtoll(row[0], NULL, 10) : 0;
        int count = row[1] ? atoi(row[1]) : 0;
        result = iez_db_row(abspath, size, count, row[2], row[3], row[4], out);
    }
    mysql_free_result(res);
done:
    iez_busy--;
    free(query);
    if (result == IEZ_LOOKUP_ERROR && status) {
        /* the server took the query and did not answer by the deadline (a locked table, a loaded server):
         * the connection is mid-query and cannot be used again, db.c discards it */
        iez_debug("MariaDB lookup of %s timed out", abspath);
        result = IEZ_LOOKUP_LATE;
    }
    return result;
}

/* A connection a cut-off query left mid-query: closed and freed. The socket is shut down first, so
 * mysql_close's goodbye fails at once instead of waiting on a server that does not read; its close
 * goes through libiez's close (the descriptor is forgotten there too). */
static void mdb_discard(void *arg)
{
    MYSQL *m = arg;
    my_socket s = mysql_get_socket(m);
    if ((int)s >= 0) {
        iez_fd_forget((int)s);
        shutdown((int)s, SHUT_RDWR);
    }
    iez_busy++;
    mysql_close(m);
    iez_busy--;
}

static void mdb_abandon(void *arg)
{
    drop(arg); /* the child's copy of the socket only; the parent's connection lives on */
}

/* The socket closed without a goodbye (mysql_close could write to a number another thread
 * has reopened since); the client's memory stays: this happens once per process. */
const struct iez_backend iez_mariadb_backend = { "mariadb", mdb_connect, mdb_lookup, mdb_abandon, mdb_abandon,
                                                 mdb_discard };
#else
const struct iez_backend iez_mariadb_backend = { "mariadb", 0, 0, 0, 0, 0 };
#endif
