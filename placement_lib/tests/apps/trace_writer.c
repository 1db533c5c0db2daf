/* Writes known byte counts through every POSIX and stdio write call libiez's
 * tracing mode counts, so the test can compare the trace with exact numbers.
 *   trace_writer DIR   -> DIR/posix.dat (write 1000 + pwrite 500 + writev 300+200 + pwritev 100)
 *                         DIR/stdio.dat (fwrite 7 x 1024 + fprintf "2\n": 7170 bytes, all counted)
 *                         DIR/read-only.dat is only read: it must not appear in the trace */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    char path[4096], buf[4096];
    memset(buf, 'x', sizeof buf);

    snprintf(path, sizeof path, "%s/posix.dat", argv[1]);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0)
        return 1;
    if (write(fd, buf, 1000) != 1000) return 1;
    if (pwrite(fd, buf, 500, 1000) != 500) return 1;
    if (lseek(fd, 1500, SEEK_SET) != 1500) return 1;
    struct iovec iov[2] = { { buf, 300 }, { buf, 200 } };
    if (writev(fd, iov, 2) != 500) return 1;
    struct iovec one = { buf, 100 };
    if (pwritev(fd, &one, 1, 2000) != 100) return 1;
    if (close(fd) != 0) return 1;

    snprintf(path, sizeof path, "%s/stdio.dat", argv[1]);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 1;
    for (int i = 0; i < 7; i++)
        if (fwrite(buf, 1024, 1, fp) != 1) return 1;
    fprintf(fp, "%d\n", argc); /* 2 bytes, counted by the stdio interposers */
    if (fclose(fp) != 0) return 1;

    snprintf(path, sizeof path, "%s/read-only.dat", argv[1]);
    fd = open(path, O_RDONLY);
    if (fd >= 0) {
        if (read(fd, buf, 10) < 0) return 1;
        close(fd);
    }
    return 0;
}
