/* Opens whose outcomes are known, for comparing runs with and without libiez.
 *
 *   errno_probe DIR
 *
 * DIR must hold (made by the caller): a regular file "exists", a regular file
 * "regular", a directory "adir", a symbolic link "dangling" to the missing
 * "target", and no "missing" directory. Each probe prints one line
 *
 *   <label> <call> <result> <errno name> [mode=<octal>]
 *
 * where result is "ok" or "-1" (file descriptors are not printed: libiez's own
 * DB connection may hold one), errno is the value after the call (set to EDOM
 * first, so a successful call that clobbers errno shows), and mode is the new
 * file's permission bits. The output depends only on what the calls did, so a
 * run under libiez must print exactly what a plain run prints. Exit status 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir;

static const char *path(const char *name)
{
    static char buf[8192];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static const char *errname(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

static void report_fd(const char *label, const char *call, int fd, int err, const char *name)
{
    if (fd < 0) {
        printf("%s %s -1 %s\n", label, call, errname(err));
        return;
    }
    struct stat st;
    int mode = fstat(fd, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
    printf("%s %s ok %s mode=%o\n", label, call, errname(err), mode);
    (void)name;
    close(fd);
}

static void probe_open(const char *label, const char *name, int flags, mode_t mode)
{
    errno = EDOM;
    int fd = open(path(name), flags, mode);
    report_fd(label, "open", fd, errno, name);
}

static void probe_creat(const char *label, const char *name, mode_t mode)
{
    errno = EDOM;
    int fd = creat(path(name), mode);
    report_fd(label, "creat", fd, errno, name);
}

static void probe_openat(const char *label, int dfd, const char *name, int flags, mode_t mode)
{
    errno = EDOM;
    int fd = openat(dfd, name, flags, mode);
    report_fd(label, "openat", fd, errno, name);
}

static void probe_fopen(const char *label, const char *name, const char *mode)
{
    errno = EDOM;
    FILE *fp = fopen(path(name), mode);
    int err = errno;
    if (!fp) {
        printf("%s fopen(%s) -1 %s\n", label, mode, errname(err));
        return;
    }
    struct stat st;
    int m = fstat(fileno(fp), &st) == 0 ? (int)(st.st_mode & 07777) : -1;
    printf("%s fopen(%s) ok %s mode=%o\n", label, mode, errname(err), m);
    fclose(fp);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: errno_probe DIR\n");
        return 2;
    }
    dir = argv[1];
    umask(022);
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* failures */
    probe_open("missing_dir", "missing/f", O_CREAT | O_WRONLY, 0644);
    probe_open("excl_existing", "exists", O_CREAT | O_EXCL | O_WRONLY, 0644);
    probe_open("parent_is_file", "regular/f", O_CREAT | O_WRONLY, 0644);
    probe_fopen("wx_existing", "exists", "wx");
    probe_creat("creat_missing_dir", "missing/g", 0644);
    probe_open("dir_as_file", "adir", O_CREAT | O_WRONLY, 0644);
    probe_open("trailing_slash", "newdir/", O_CREAT | O_WRONLY, 0644);
    probe_open("excl_dangling", "dangling", O_CREAT | O_EXCL | O_WRONLY, 0644);
    probe_fopen("fopen_missing_dir", "missing/h", "w");
    probe_fopen("fopen_r_missing", "nothere", "r");
    probe_open("no_creat_missing", "nothere", O_WRONLY, 0);
    char longname[400];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    probe_open("name_too_long", longname, O_CREAT | O_WRONLY, 0644);
    errno = EDOM;
    int fd = open("", O_CREAT | O_WRONLY, 0644);
    report_fd("empty_path", "open", fd, errno, "");
    probe_openat("bad_dirfd", 9999, "x", O_CREAT | O_WRONLY, 0644);
    int filefd = open(path("regular"), O_RDONLY);
    probe_openat("dirfd_is_file", filefd, "x", O_CREAT | O_WRONLY, 0644);
    close(filefd);

    /* successes: new files, some of which the caller may have pinned */
    probe_open("new_excl", "new_excl", O_CREAT | O_EXCL | O_WRONLY, 0640);
    probe_open("new_trunc", "new_trunc", O_CREAT | O_TRUNC | O_WRONLY, 0600);
    probe_open("new_rdonly", "new_rdonly", O_CREAT | O_RDONLY, 0444);
    probe_open("new_append", "new_append", O_CREAT | O_APPEND | O_WRONLY, 0666);
    probe_creat("creat_new", "creat_new", 0604);
    probe_fopen("fopen_wx_new", "fopen_wx_new", "wx");
    probe_fopen("fopen_w_new", "fopen_w_new", "w");
    probe_fopen("fopen_a_new", "fopen_a_new", "a+");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    probe_openat("openat_new", dfd, "openat_new", O_CREAT | O_WRONLY | O_EXCL, 0644);
    close(dfd);
    probe_open("creat_through_dangling", "dangling", O_CREAT | O_WRONLY, 0644);
    probe_open("existing_no_excl", "exists", O_CREAT | O_WRONLY, 0644);
    probe_open("existing_excl_again", "new_excl", O_CREAT | O_EXCL | O_WRONLY, 0644);
    return 0;
}
