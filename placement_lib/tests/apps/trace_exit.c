/* A stream left open with its bytes still in the buffer, then the process ends.
 *
 *   trace_exit DIR exit|_exit
 *
 * fopen(DIR/buffered.dat, "w"), fputs 40 bytes (they stay in the stream's
 * buffer), then either returns from main (exit() flushes them: the file holds
 * 40 bytes) or calls _exit(0) (they are lost: the file stays empty).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/buffered.dat", argv[1]);
    FILE *fp = fopen(path, "w");
    if (!fp || fputs("forty bytes that wait in a stdio buffer.", fp) < 0)
        return 1;
    if (!strcmp(argv[2], "_exit"))
        _exit(0);
    return 0;
}
