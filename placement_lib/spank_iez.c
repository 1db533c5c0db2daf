/* spank_iez.so: a Slurm SPANK plugin that places every job's files with iez, without the user touching
 * LD_PRELOAD (issue 26, docs/scheduler.md).
 *
 *   plugstack.conf:  optional /usr/lib/iez/spank_iez.so default=auto iez=/usr/bin/iez lib=/usr/lib/iez/libiez.so
 *                    api=https://iez.example.org:8443 timeout=10 mapdir=/tmp
 *   job:             srun --iez[=auto|off|trace] ...      (without --iez: the site's default=)
 *
 * In slurm_spank_user_init (on the compute node, once per step, as the job's user, before the tasks
 * start) the plugin names the application: IEZ_APP from the job's environment when set, else
 * "<executable's base name>.<user>" (Lustre's default job id %e.%u, the name `iez learn --darshan-dir`
 * stores a user's Darshan runs under). Mode auto runs `iez map fetch --app APP --out FILE --json` (the
 * user's own credential: MUNGE through the node's munged, as by hand), bounded by timeout= seconds
 * (killed past it): a map with layouts sets LD_PRELOAD (libiez prepended), IEZ_MAP and IEZ_APP for the
 * tasks only (spank_setenv: the job's environment, not slurmstepd's); a map without layouts, or an
 * application the API does not know (404), sets the tracing mode (IEZ_MODE=trace) so that the next run
 * is placed. Mode trace traces whatever iez knows. Mode off, an unreachable API, a bad option or any
 * other error: one line "iez: ..." on the job's stderr and the job runs unplaced. Every callback returns
 * 0: the plugin never fails a job.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(iez, 1);

enum mode { MODE_UNSET = -1, MODE_OFF = 0, MODE_AUTO, MODE_TRACE };

static int site_default = MODE_AUTO;
static int job_mode = MODE_UNSET;
static char iez_cmd[1024] = "iez";
static char lib_path[1024] = "/usr/lib/iez/libiez.so";
static char api_url[1024] = "";
static char map_dir[1024] = "/tmp";
static double fetch_timeout = 10.0;

static int parse_mode(const char *s)
{
    if (!s || !*s || !strcmp(s, "auto"))
        return MODE_AUTO;
    if (!strcmp(s, "off"))
        return MODE_OFF;
    if (!strcmp(s, "trace"))
        return MODE_TRACE;
    return -2;
}

static int opt_cb(int val, const char *optarg, int remote)
{
    int m = parse_mode(optarg);
    if (m == -2) {
        slurm_error("iez: --iez=%s is not auto, off or trace: the job runs unplaced", optarg);
        job_mode = MODE_OFF;
        return 0; /* a bad option never fails the job */
    }
    job_mode = m;
    return 0;
}

struct spank_option spank_options[] = {
    {"iez", "[auto|off|trace]", "place the job's files with iez (auto: placed when iez learnt the application, "
     "else traced; trace; off)", 2, 0, opt_cb},
    SPANK_OPTIONS_TABLE_END};

static void copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        const char *a = av[i];
        if (!strncmp(a, "default=", 8)) {
            int m = parse_mode(a + 8);
            if (m == -2)
                slurm_error("iez: plugstack.conf default=%s is not auto, off or trace: off", a + 8);
            site_default = m == -2 ? MODE_OFF : m;
        } else if (!strncmp(a, "iez=", 4))
            copy(iez_cmd, sizeof iez_cmd, a + 4);
        else if (!strncmp(a, "lib=", 4))
            copy(lib_path, sizeof lib_path, a + 4);
        else if (!strncmp(a, "api=", 4))
            copy(api_url, sizeof api_url, a + 4);
        else if (!strncmp(a, "mapdir=", 7))
            copy(map_dir, sizeof map_dir, a + 7);
        else if (!strncmp(a, "timeout=", 8)) {
            double t = strtod(a + 8, NULL);
            if (t > 0 && t <= 600)
                fetch_timeout = t;
        } else
            slurm_error("iez: unknown plugstack.conf argument %s (ignored)", a);
    }
    return 0;
}

/* The job's stderr: in user_init, slurmstepd's stderr is not the job's; slurm_error goes to the job's
 * srun, as one line. */
#define SAY(...) slurm_error("iez: " __VA_ARGS__)

/* Runs argv with stdout captured into out (n bytes), killed after timeout_s; returns the exit status
 * (0..255), or -1 when it could not run or was killed. */
static int run_bounded(char *const argv[], char *const envp[], char *out, size_t n, char *err, size_t en,
                       double timeout_s)
{
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(pe, O_CLOEXEC) < 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        setpgid(0, 0);
        execvpe(argv[0], argv, envp);
        dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    size_t got = 0, egot = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int open_fds = 2, killed = 0;
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    while (open_fds > 0) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double left = timeout_s - ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9);
        if (left <= 0) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            killed = 1;
            break;
        }
        int r = poll(fds, 2, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            break;
        for (int k = 0; k < 2; k++) {
            if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[4096];
            ssize_t m = read(fds[k].fd, buf, sizeof buf);
            if (m <= 0) {
                close(fds[k].fd);
                fds[k].fd = -1;
                open_fds--;
                continue;
            }
            char *dst = k ? err : out;
            size_t *have = k ? &egot : &got, cap = k ? en : n;
            size_t take = (size_t)m < cap - 1 - *have ? (size_t)m : cap - 1 - *have;
            memcpy(dst + *have, buf, take);
            *have += take;
        }
    }
    for (int k = 0; k < 2; k++)
        if (fds[k].fd >= 0)
            close(fds[k].fd);
    out[got] = 0;
    err[egot] = 0;
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (killed)
        return -2;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int getenv_job(spank_t sp, const char *name, char *buf, int len)
{
    return spank_getenv(sp, name, buf, len) == ESPANK_SUCCESS && buf[0];
}

static void set_preload(spank_t sp)
{
    char old[4096] = "", val[8192];
    if (getenv_job(sp, "LD_PRELOAD", old, sizeof old) && strstr(old, lib_path))
        return;
    if (old[0])
        snprintf(val, sizeof val, "%s:%s", lib_path, old);
    else
        snprintf(val, sizeof val, "%s", lib_path);
    spank_setenv(sp, "LD_PRELOAD", val, 1);
}

/* The application's name: IEZ_APP, else "<executable's base name>.<user>". */
static int app_name(spank_t sp, char *app, size_t n)
{
    char given[512];
    if (getenv_job(sp, "IEZ_APP", given, sizeof given)) {
        copy(app, n, given);
        return 0;
    }
    int argc = 0;
    char **argv = NULL;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv[0])
        return -1;
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    char user[256];
    if (!getenv_job(sp, "SLURM_JOB_USER", user, sizeof user) && !getenv_job(sp, "USER", user, sizeof user)) {
        uid_t uid;
        if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS)
            return -1;
        snprintf(user, sizeof user, "uid%u", (unsigned)uid);
    }
    snprintf(app, n, "%s.%s", base, user);
    return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    if (!spank_remote(sp))
        return 0;
    int mode = job_mode != MODE_UNSET ? job_mode : site_default;
    if (mode == MODE_OFF)
        return 0;
    char app[512];
    if (app_name(sp, app, sizeof app) < 0) {
        SAY("cannot name the application: the job runs unplaced");
        return 0;
    }
    if (access(lib_path, R_OK) != 0) {
        SAY("%s: %s: the job runs unplaced", lib_path, strerror(errno));
        return 0;
    }
    if (mode == MODE_TRACE)
        goto trace;
    uint32_t jobid = 0, stepid = 0;
    spank_get_item(sp, S_JOB_ID, &jobid);
    spank_get_item(sp, S_JOB_STEPID, &stepid);
    char map[1200], api[1100] = "", timeout[32];
    snprintf(map, sizeof map, "%s/iez-map.%u.%u.%d", map_dir, jobid, stepid, (int)getuid());
    if (!api_url[0])
        getenv_job(sp, "IEZ_API_URL", api, sizeof api);
    else
        copy(api, sizeof api, api_url);
    if (!api[0]) {
        SAY("no API URL (plugstack.conf api= or IEZ_API_URL): the job runs unplaced");
        return 0;
    }
    snprintf(timeout, sizeof timeout, "%g", fetch_timeout);
    char *argv[] = {iez_cmd, "map", "fetch", "--api", api, "--app", app, "--out", map, "--json",
                    "--timeout", timeout, NULL};
    /* the job's environment (the user's PATH, PYTHONPATH, IEZ_MUNGE_SOCKET, tokens), not slurmstepd's */
    char **job_env = NULL;
    if (spank_get_item(sp, S_JOB_ENV, &job_env) != ESPANK_SUCCESS || !job_env) {
        SAY("cannot read the job's environment: the job runs unplaced");
        return 0;
    }
    char out[8192], err[8192];
    int rc = run_bounded(argv, job_env, out, sizeof out, err, sizeof err, fetch_timeout + 2);
    if (rc == 0) {
        const char *e = strstr(out, "\"entries\":");
        long entries = e ? strtol(e + 10, NULL, 10) : 0;
        if (entries > 0) {
            set_preload(sp);
            spank_setenv(sp, "IEZ_MAP", map, 1);
            spank_setenv(sp, "IEZ_APP", app, 1);
            spank_setenv(sp, "IEZ_MODE", "place", 1);
            return 0;
        }
        unlink(map);
        goto trace; /* iez knows the application but has no layouts for it: learn it */
    }
    if (rc > 0 && strstr(err, ": 404 "))
        goto trace; /* the API does not know the application */
    {
        char *nl = strchr(err, '\n');
        if (nl)
            *nl = 0;
        SAY("map of %s not fetched (%s): the job runs unplaced", app,
            rc == -2 ? "timed out" : err[0] ? err : "iez map fetch failed");
    }
    return 0;
trace:
    set_preload(sp);
    spank_setenv(sp, "IEZ_APP", app, 1);
    spank_setenv(sp, "IEZ_MODE", "trace", 1);
    return 0;
}
