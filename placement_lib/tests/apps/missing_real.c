/* Calls interposed symbols whose real function no library defines: MPI and HDF5 entry points, in a
 * program that has neither (issue 28 item 6).
 *
 *   missing_real DIR
 *
 * The program finds each with dlsym(RTLD_DEFAULT): run plainly it finds nothing and prints
 * "NAME absent"; under libiez it finds libiez's interposer, whose real function is missing, and
 * calls it (file names below DIR, no create flag): "NAME RC ENOSYS" when the call failed as a missing
 * function would (errno ENOSYS), "NAME RC errno N" otherwise. Exit status 0 either way: a crash is
 * what the test looks for.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void say(const char *name, long long rc)
{
    if (errno == ENOSYS)
        printf("%s %lld ENOSYS\n", name, rc);
    else
        printf("%s %lld errno %d\n", name, rc, errno);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: missing_real DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/missing.h5", argv[1]);
    int (*mpi_init)(int *, char ***) = (int (*)(int *, char ***))dlsym(RTLD_DEFAULT, "MPI_Init");
    int (*mpi_open)(void *, const char *, int, void *, void **) =
        (int (*)(void *, const char *, int, void *, void **))dlsym(RTLD_DEFAULT, "MPI_File_open");
    int (*mpi_write)(void *, const void *, int, void *, void *) =
        (int (*)(void *, const void *, int, void *, void *))dlsym(RTLD_DEFAULT, "MPI_File_write");
    int64_t (*h5_create)(const char *, unsigned, int64_t, int64_t) =
        (int64_t(*)(const char *, unsigned, int64_t, int64_t))dlsym(RTLD_DEFAULT, "H5Fcreate");
    if (!mpi_init || !mpi_open || !mpi_write || !h5_create) {
        printf("MPI_Init absent\nMPI_File_open absent\nMPI_File_write absent\nH5Fcreate absent\n");
        return 0;
    }
    void *fh = NULL;
    errno = 0;
    say("MPI_Init", mpi_init(&argc, &argv));
    errno = 0;
    say("MPI_File_open", mpi_open(NULL, path, 0, NULL, &fh));
    errno = 0;
    say("MPI_File_write", mpi_write(fh, "x", 1, NULL, NULL));
    errno = 0;
    say("H5Fcreate", (long long)h5_create(path, 0, 0, 0));
    return 0;
}
