/* Every way a program creates a file, in DIR, printing what each call returned so the same program run
 * plainly and under libiez can be compared: the descriptor number (or the errno), the file status
 * flags and close-on-exec bit of the descriptor, the file's permission bits, and what a stream
 * reports. DIR/exists must exist beforehand with the content "keep"; DIR/dangling is made here as a
 * link to a missing target.
 *
 *   create_calls DIR
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[4096];

static const char *at(const char *name)
{
    static char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Only descriptor calls here: a trace of the program's system calls shows each path once per call. */
static void show_fd(const char *what, int fd, const char *name)
{
    (void)name;
    if (fd < 0) {
        printf("%s: -1 %s\n", what, strerrorname_np(errno));
        return;
    }
    struct stat st;
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    int rc = fstat(fd, &st);
    printf("%s: fd %d flags %#o cloexec %d mode %o size %lld\n", what, fd, fl, !!(fdfl & FD_CLOEXEC),
           rc == 0 ? (unsigned)(st.st_mode & 07777) : 0u, rc == 0 ? (long long)st.st_size : -1LL);
}

static void show_stream(const char *what, FILE *fp)
{
    if (!fp) {
        printf("%s: NULL %s\n", what, strerrorname_np(errno));
        return;
    }
    show_fd(what, fileno(fp), NULL);
    int wrote = fputs("data", fp) >= 0;
    printf("%s: write %d tell %ld\n", what, wrote, ftell(fp));
    fclose(fp);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: create_calls DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    umask(022);
    int fds[16], n = 0;
    fds[n] = open(at("open.new"), O_CREAT | O_WRONLY | O_TRUNC, 0640);
    show_fd("open O_CREAT|O_WRONLY|O_TRUNC", fds[n++], "open.new");
    fds[n] = open(at("excl.new"), O_CREAT | O_EXCL | O_RDWR, 0600);
    show_fd("open O_CREAT|O_EXCL|O_RDWR", fds[n++], "excl.new");
    fds[n] = open(at("rdonly.new"), O_CREAT | O_RDONLY, 0444);
    show_fd("open O_CREAT|O_RDONLY 0444", fds[n++], "rdonly.new");
    fds[n] = open(at("exists"), O_CREAT | O_WRONLY, 0644);
    show_fd("open existing O_CREAT", fds[n++], "exists");
    fds[n] = open(at("exists"), O_CREAT | O_EXCL | O_WRONLY, 0644);
    show_fd("open existing O_CREAT|O_EXCL", fds[n++], "exists");
    fds[n] = open(at("missing-dir/f"), O_CREAT | O_WRONLY, 0644);
    show_fd("open in a missing directory", fds[n++], NULL);
    if (symlink("target.missing", at("dangling")) != 0)
        perror("symlink");
    fds[n] = open(at("dangling"), O_CREAT | O_WRONLY, 0644);
    show_fd("open through a dangling link", fds[n++], "target.missing");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    fds[n] = openat(dfd, "openat.new", O_CREAT | O_RDWR | O_APPEND | O_CLOEXEC, 0600);
    show_fd("openat O_CREAT|O_RDWR|O_APPEND|O_CLOEXEC", fds[n++], "openat.new");
    fds[n] = creat(at("creat.new"), 0644);
    show_fd("creat", fds[n++], "creat.new");
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    close(dfd);

    show_stream("fopen w", fopen(at("fopen-w.new"), "w"));
    show_stream("fopen a+", fopen(at("fopen-a+.new"), "a+"));
    show_stream("fopen wx", fopen(at("fopen-wx.new"), "wx"));
    show_stream("fopen we", fopen(at("fopen-we.new"), "we"));
    show_stream("fopen wbx", fopen(at("fopen-wbx.new"), "wbx"));
    show_stream("fopen wx existing", fopen(at("exists"), "wx"));
    show_stream("fopen a existing", fopen(at("exists"), "a"));
    show_stream("fopen w,ccs=UTF-8", fopen(at("fopen-ccs.new"), "w,ccs=UTF-8"));
    return 0;
}
