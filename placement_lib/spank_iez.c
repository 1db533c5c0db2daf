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
 * 0: the plugin never fails a job. A traced step writes its traces into MAPDIR/iez-trace.JOB.STEP.UID; at
 * the step's end (slurm_spank_exit) a detached learner, as the user, learns them through the API and has
 * them allocated, so the next run is placed (docs/scheduler.md).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
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
static double learn_timeout = 900.0;
/* Set in user_init when the step is traced, read in slurm_spank_exit (the same slurmstepd). */
static char learn_app[512] = "";
static char learn_dir[1200] = "";
static char learn_api[1100] = "";
static char dir_default[1024] = ""; /* dirdefault=: the site's default layout template (JSON file) */
static char include_fs[2048] = "";  /* include=: the parallel file systems' mounts (IEZ_INCLUDE), e.g. /lustre */

static int parse_mode(const char *s)
{
    /* "(null)": how Slurm passes a bare --iez from sbatch's options on to the steps inside the job */
    if (!s || !*s || !strcmp(s, "auto") || !strcmp(s, "(null)"))
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

/* Registered in slurm_spank_init, not exported as spank_options: Slurm ignores that static table in the
 * allocator context, so sbatch and salloc would refuse --iez (and #SBATCH --iez). */
static struct spank_option iez_option = {"iez", "[auto|off|trace]",
    "place the job's files with iez (auto: placed when iez learnt the application, else traced; trace; off)",
    2, 0, opt_cb};

static void copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_REMOTE || ctx == S_CTX_ALLOCATOR)
        spank_option_register(sp, &iez_option);
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
        else if (!strncmp(a, "dirdefault=", 11))
            copy(dir_default, sizeof dir_default, a + 11);
        else if (!strncmp(a, "include=", 8))
            copy(include_fs, sizeof include_fs, a + 8);
        else if (!strncmp(a, "mapdir=", 7))
            copy(map_dir, sizeof map_dir, a + 7);
        else if (!strncmp(a, "learn_timeout=", 14)) {
            double t = strtod(a + 14, NULL);
            if (t > 0 && t <= 86400)
                learn_timeout = t;
        } else if (!strncmp(a, "timeout=", 8)) {
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

/* The batch step (sbatch's script) runs slurmd's copy of the script (.../slurm_script): its name is the
 * job's (SLURM_JOB_NAME, sbatch's --job-name, by default the script's name). */
static int is_batch_step(spank_t sp)
{
    uint32_t stepid = 0;
    return spank_get_item(sp, S_JOB_STEPID, &stepid) == ESPANK_SUCCESS && stepid == SLURM_BATCH_SCRIPT;
}

/* Whether path is prefix or below it (whole components). */
static int under(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/')
        n--;
    if (n == 1 && prefix[0] == '/')
        return 1;
    return !strncmp(path, prefix, n) && (path[n] == 0 || path[n] == '/');
}

/* Whether a colon-separated list has an entry below path (below = 1) or one that is path or above it (0). */
static int list_has(const char *list, const char *path, int below)
{
    char copy_[8192], *save = NULL;
    copy(copy_, sizeof copy_, list);
    for (char *p = strtok_r(copy_, ":", &save); p; p = strtok_r(NULL, ":", &save))
        if (*p == '/' && (below ? under(p, path) : under(path, p)))
            return 1;
    return 0;
}

/* Where the tasks are traced and placed, the rule of `iez run` (iez/predict/scope.py): the job's IEZ_INCLUDE,
 * else the site's include= (its Lustre mounts), else a working directory inside a runtime area alone; the
 * runtime areas (/tmp, /var/tmp, /dev/shm, /run, /var/run, $TMPDIR, $XDG_RUNTIME_DIR) excluded unless what is
 * included lies inside one. MPI runtimes' session files (/tmp/ompi.*, PMIx segments) are then neither
 * traced nor learnt: their names hold pids that no later run creates. */
static void set_scope(spank_t sp)
{
    char include[4096] = "", exclude[8192] = "", cwd[4096] = "", value[1024];
    const char *areas[8] = {"/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run", NULL, NULL, NULL};
    char tmpdir[1024] = "", xdg[1024] = "";
    if (getenv_job(sp, "TMPDIR", tmpdir, sizeof tmpdir) && tmpdir[0] == '/' && strcmp(tmpdir, "/"))
        areas[5] = tmpdir;
    if (getenv_job(sp, "XDG_RUNTIME_DIR", xdg, sizeof xdg) && xdg[0] == '/' && strcmp(xdg, "/"))
        areas[6] = xdg;
    if (!getenv_job(sp, "IEZ_INCLUDE", include, sizeof include)) {
        if (include_fs[0])
            copy(include, sizeof include, include_fs);
        else if (getenv_job(sp, "PWD", cwd, sizeof cwd) || getenv_job(sp, "SLURM_SUBMIT_DIR", cwd, sizeof cwd))
            for (int k = 0; k < 8; k++)
                if (areas[k] && under(cwd, areas[k]))
                    copy(include, sizeof include, cwd);
        if (include[0])
            spank_setenv(sp, "IEZ_INCLUDE", include, 1);
    }
    if (getenv_job(sp, "IEZ_EXCLUDE", value, sizeof value))
        copy(exclude, sizeof exclude, value);
    for (int k = 0; k < 8; k++) {
        if (!areas[k] || (include[0] && list_has(include, areas[k], 1)) || list_has(exclude, areas[k], 0))
            continue;
        size_t used = strlen(exclude);
        snprintf(exclude + used, sizeof exclude - used, "%s%s", used ? ":" : "", areas[k]);
    }
    if (exclude[0])
        spank_setenv(sp, "IEZ_EXCLUDE", exclude, 1);
}

/* The application's name: IEZ_APP, else "<executable's base name>.<user>" (a batch script: "<job name>.<user>"). */
static int app_name(spank_t sp, char *app, size_t n)
{
    char given[512];
    if (getenv_job(sp, "IEZ_APP", given, sizeof given)) {
        copy(app, n, given);
        return 0;
    }
    int argc = 0;
    char **argv = NULL;
    char job_name[256];
    const char *base;
    if (is_batch_step(sp) && getenv_job(sp, "SLURM_JOB_NAME", job_name, sizeof job_name))
        base = job_name;
    else {
        if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv[0])
            return -1;
        base = strrchr(argv[0], '/');
        base = base ? base + 1 : argv[0];
    }
    char user[256];
    if (!getenv_job(sp, "SLURM_JOB_USER", user, sizeof user) && !getenv_job(sp, "USER", user, sizeof user)) {
        uid_t uid;
        if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS)
            return -1;
        struct passwd pw, *found = NULL;
        char pwbuf[4096];
        if (getpwuid_r(uid, &pw, pwbuf, sizeof pwbuf, &found) == 0 && found)
            copy(user, sizeof user, found->pw_name); /* a batch script's environment need not carry USER */
        else
            snprintf(user, sizeof user, "uid%u", (unsigned)uid);
    }
    snprintf(app, n, "%s.%s", base, user);
    return 0;
}

static int own_directory(const char *dir);

/* The executable a step runs: argv[0] as given, else found on the job's PATH (n bytes in exe). */
static int find_executable(spank_t sp, const char *arg0, char *exe, size_t n)
{
    if (strchr(arg0, '/')) {
        copy(exe, n, arg0);
        return access(exe, X_OK);
    }
    char path[4096];
    if (!getenv_job(sp, "PATH", path, sizeof path))
        copy(path, sizeof path, "/usr/local/bin:/usr/bin:/bin");
    for (char *dir = strtok(path, ":"); dir; dir = strtok(NULL, ":")) {
        snprintf(exe, n, "%s/%s", *dir ? dir : ".", arg0);
        if (access(exe, X_OK) == 0)
            return 0;
    }
    return -1;
}

/* 1 when exe is an ELF executable without a program interpreter (statically linked: LD_PRELOAD cannot reach
 * it), 0 otherwise (dynamic, a script, unreadable). */
static int is_static(const char *exe)
{
    int fd = open(exe, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    Elf64_Ehdr eh;
    int found = 0;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0) {
        close(fd);
        return 0;
    }
    for (int k = 0; k < eh.e_phnum && k < 256; k++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)k * sizeof ph)) != (ssize_t)sizeof ph)
            break;
        if (ph.p_type == PT_INTERP) {
            found = 1;
            break;
        }
    }
    close(fd);
    return !found;
}

/* The site's default layout (dirdefault=) on the step's working directory, unless it has one already:
 * `iez layout set-default DIR --layout @FILE --if-unset`, as the user, bounded like the map fetch. For jobs
 * iez cannot place file by file: static binaries, and applications it has not learnt yet. */
static void set_directory_default(spank_t sp, const char *why)
{
    if (!dir_default[0])
        return;
    char cwd[4096], layout[1100], timeout[32];
    if (!getenv_job(sp, "PWD", cwd, sizeof cwd) && !getenv_job(sp, "SLURM_SUBMIT_DIR", cwd, sizeof cwd))
        return;
    char **job_env = NULL;
    if (spank_get_item(sp, S_JOB_ENV, &job_env) != ESPANK_SUCCESS || !job_env)
        return;
    snprintf(layout, sizeof layout, "@%s", dir_default);
    snprintf(timeout, sizeof timeout, "%g", fetch_timeout);
    char *argv[] = {iez_cmd, "layout", "set-default", cwd, "--layout", layout, "--if-unset", "--json", NULL};
    char out[8192], err[8192];
    int rc = run_bounded(argv, job_env, out, sizeof out, err, sizeof err, fetch_timeout);
    if (rc != 0) {
        char *nl = strchr(err, '\n');
        if (nl)
            *nl = 0;
        SAY("%s: the site's default layout not set (%s)", cwd, rc == -2 ? "timed out" : err[0] ? err : "failed");
    } else
        slurm_info("iez: %s: %s, the site's default layout %s", cwd, why,
                   strstr(out, "\"kept\": true") ? "not needed (it has one)" : "set");
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    if (!spank_remote(sp))
        return 0;
    int mode = job_mode != MODE_UNSET ? job_mode : site_default;
    if (mode == MODE_OFF)
        return 0;
    {
        /* an srun inside a batch script the plugin prepared: its tasks inherit the script's map or trace
         * directory (one application, learnt once, at the batch step's end) */
        char preload[4096], inherited[1200];
        if (!is_batch_step(sp) && getenv_job(sp, "LD_PRELOAD", preload, sizeof preload) && strstr(preload, lib_path) &&
            (getenv_job(sp, "IEZ_MAP", inherited, sizeof inherited) ||
             getenv_job(sp, "IEZ_TRACE_DIR", inherited, sizeof inherited)))
            return 0;
    }
    char app[512];
    if (app_name(sp, app, sizeof app) < 0) {
        SAY("cannot name the application: the job runs unplaced");
        return 0;
    }
    {
        int argc = 0;
        char **args = NULL, exe[4096];
        if (spank_get_item(sp, S_JOB_ARGV, &argc, &args) == ESPANK_SUCCESS && argc > 0 && args[0] &&
            find_executable(sp, args[0], exe, sizeof exe) == 0 && is_static(exe)) {
            set_directory_default(sp, "a static executable");
            return 0; /* LD_PRELOAD cannot reach it: its directory's default is all iez can give it */
        }
    }
    if (access(lib_path, R_OK) != 0) {
        SAY("%s: %s: the job runs unplaced", lib_path, strerror(errno));
        return 0;
    }
    uint32_t jobid = 0, stepid = 0;
    spank_get_item(sp, S_JOB_ID, &jobid);
    spank_get_item(sp, S_JOB_STEPID, &stepid);
    char api[1100] = "";
    if (!api_url[0])
        getenv_job(sp, "IEZ_API_URL", api, sizeof api);
    else
        copy(api, sizeof api, api_url);
    if (mode == MODE_TRACE)
        goto trace;
    char map[1200], timeout[32];
    snprintf(map, sizeof map, "%s/iez-map.%u.%u.%d", map_dir, jobid, stepid, (int)getuid());
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
            set_scope(sp);
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
    set_directory_default(sp, "an application iez has not learnt yet");
    /* the step's traces go to a directory of the user's own; slurm_spank_exit learns them */
    snprintf(learn_dir, sizeof learn_dir, "%s/iez-trace.%u.%u.%d", map_dir, jobid, stepid, (int)getuid());
    if (own_directory(learn_dir) != 0) {
        SAY("%s: %s: the job runs untraced", learn_dir, strerror(errno));
        learn_dir[0] = 0;
        return 0;
    }
    set_preload(sp);
    set_scope(sp);
    spank_setenv(sp, "IEZ_APP", app, 1);
    spank_setenv(sp, "IEZ_MODE", "trace", 1);
    spank_setenv(sp, "IEZ_TRACE_DIR", learn_dir, 1);
    copy(learn_app, sizeof learn_app, app);
    copy(learn_api, sizeof learn_api, api);
    if (!api[0])
        SAY("no API URL (plugstack.conf api= or IEZ_API_URL): traced into %s, not learnt", learn_dir);
    return 0;
}

/* A directory only this user can write, made now (mode 0700) or already there as such, never a symlink. */
static int own_directory(const char *dir)
{
    if (mkdir(dir, 0700) == 0)
        return 0;
    if (errno != EEXIST)
        return -1;
    struct stat st;
    if (lstat(dir, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

/* Leaves the job's cgroup (v2: the root's cgroup.procs; best effort, root only) so that the learner outlives
 * the step under proctrack/cgroup, which kills what is left in it. */
static void leave_job_cgroup(void)
{
    int fd = open("/sys/fs/cgroup/cgroup.procs", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (write(fd, pid, (size_t)n) < 0) {
        /* not allowed here: the learner stays in the job's cgroup */
    }
    close(fd);
}

/* At the step's end (slurmstepd, as root, the tasks gone): a detached learner, as the job's user with the
 * job's environment, runs `iez learn APP --trace DIR --api URL --allocate iez` (bounded by learn_timeout=)
 * and removes DIR when it succeeds; its output goes to DIR.log. slurmstepd waits only for the first fork. */
int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    if (!spank_remote(sp) || !learn_dir[0] || !learn_api[0])
        return 0;
    char **job_env = NULL;
    uid_t uid = 0;
    gid_t gid = 0;
    if (spank_get_item(sp, S_JOB_ENV, &job_env) != ESPANK_SUCCESS || !job_env ||
        spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
        slurm_info("iez: cannot read the job's environment or user: %s not learnt", learn_dir);
        return 0;
    }
    gid_t groups[256];
    int ngroups = 0;
    if (geteuid() == 0 && uid != 0) { /* the user's groups, looked up before the fork (NSS is not fork-safe) */
        struct passwd *pw = getpwuid(uid);
        ngroups = sizeof groups / sizeof groups[0];
        if (!pw || getgrouplist(pw->pw_name, gid, groups, &ngroups) < 0) {
            groups[0] = gid;
            ngroups = 1;
        }
    }
    char log[1300], limit[32];
    snprintf(log, sizeof log, "%s.log", learn_dir);
    snprintf(limit, sizeof limit, "%g", learn_timeout);
    char *argv[] = {"sh", "-c", "timeout \"$4\" \"$0\" learn \"$1\" --trace \"$2\" --api \"$3\" --allocate iez --json "
                    "&& rm -rf -- \"$2\"", iez_cmd, learn_app, learn_dir, learn_api, limit, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        slurm_info("iez: cannot fork the learner: %s not learnt", learn_dir);
        return 0;
    }
    if (pid == 0) {
        setsid();
        pid_t again = fork();
        if (again != 0)
            _exit(again < 0);
        leave_job_cgroup();
        if (geteuid() == 0 && uid != 0 &&
            (setgroups((size_t)ngroups, groups) != 0 || setgid(gid) != 0 || setuid(uid) != 0))
            _exit(1);
        if (chdir("/") != 0)
            _exit(1);
        int nul = open("/dev/null", O_RDWR);
        int out = open(log, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(out >= 0 ? out : nul, 1);
        dup2(out >= 0 ? out : nul, 2);
        execve("/bin/sh", argv, job_env);
        _exit(127);
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return 0;
}
