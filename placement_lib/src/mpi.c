/* MPI-IO and HDF5 entry points. libiez links against neither: these symbols
 * only matter in processes that have MPI or HDF5, and the real ones are found
 * with dlsym(RTLD_NEXT). Handles are passed through as pointer-sized values,
 * which on x86-64 carries both Open MPI's pointers and MPICH's integers. */
#include "real.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


#define MPI_MODE_CREATE 1 /* same value in Open MPI and MPICH */
#define MPI_MODE_EXCL 64
#define H5F_ACC_EXCL 0x0004u

typedef void *handle;
typedef long long mpi_offset;

/* ---- rank ------------------------------------------------------------------ */

/* MPI_Comm_rank and MPI_Comm_size: not interposed, so looked up wherever MPI is (NULL without it). */
typedef int (*comm_query_fn)(handle comm, int *out);

static void learn_rank(void)
{
    int saved = errno;
    comm_query_fn rank_fn = (comm_query_fn)dlsym(RTLD_DEFAULT, "MPI_Comm_rank");
    comm_query_fn size_fn = (comm_query_fn)dlsym(RTLD_DEFAULT, "MPI_Comm_size");
    /* MPI_COMM_WORLD: Open MPI's is the address of ompi_mpi_comm_world; MPICH's is 0x44000000. */
    handle world = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
    if (!world)
        world = (handle)(uintptr_t)0x44000000;
    int rank = -1, size = 0;
    if (rank_fn && size_fn && rank_fn(world, &rank) == 0 && size_fn(world, &size) == 0 && rank >= 0)
        iez_mpi_set_rank(rank, size);
    errno = saved;
}

IEZ_EXPORT int MPI_Init(int *argc, char ***argv)
{
    int rc = REAL(MPI_Init)(argc, argv);
    if (rc == 0)
        learn_rank();
    return rc;
}

IEZ_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = REAL(MPI_Init_thread)(argc, argv, required, provided);
    if (rc == 0)
        learn_rank();
    return rc;
}

/* ---- MPI_File handles -> trace records -------------------------------------- */

struct binding {
    handle fh;
    void *record;
};
/* The module's state: the handles' bindings. */
static struct {
    pthread_mutex_t lock;
    struct binding *list;
    size_t n, cap;
} bindings = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void bind_handle(handle fh, void *record)
{
    pthread_mutex_lock(&bindings.lock);
    for (size_t i = 0; i < bindings.n; i++)
        if (bindings.list[i].fh == fh) {
            bindings.list[i].record = record;
            pthread_mutex_unlock(&bindings.lock);
            return;
        }
    if (bindings.n == bindings.cap) {
        size_t cap = bindings.cap ? 2 * bindings.cap : 16;
        struct binding *grown = realloc(bindings.list, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&bindings.lock);
            return;
        }
        bindings.list = grown;
        bindings.cap = cap;
    }
    bindings.list[bindings.n++] = (struct binding){ fh, record };
    pthread_mutex_unlock(&bindings.lock);
}

static void *bound(handle fh, int remove)
{
    void *record = NULL;
    pthread_mutex_lock(&bindings.lock);
    for (size_t i = 0; i < bindings.n; i++)
        if (bindings.list[i].fh == fh) {
            record = bindings.list[i].record;
            if (remove)
                bindings.list[i] = bindings.list[--bindings.n];
            break;
        }
    pthread_mutex_unlock(&bindings.lock);
    return record;
}

/* ROMIO accepts "ufs:/path", "lustre:/path"...: the file system prefix is not part of the name. */
static const char *strip_fs_prefix(const char *name)
{
    const char *colon = strchr(name, ':');
    if (colon && colon - name < 16 && !memchr(name, '/', (size_t)(colon - name)))
        return colon + 1;
    return name;
}

struct traced_open {
    const char *path;
    handle fh;
};

/* The handle's writes count for the file's record; on libiez's stack (a path takes 4 KiB). */
static void bind_traced(void *p)
{
    struct traced_open *t = p;
    char abspath[IEZ_PATH_MAX];
    if (iez_abspath(AT_FDCWD, t->path, abspath, sizeof abspath) == 0 && iez_path_considered(abspath))
        bind_handle(t->fh, iez_trace_record_for(abspath));
}

IEZ_EXPORT int MPI_File_open(handle comm, const char *filename, int amode, handle info, handle *fh)
{
    iez_MPI_File_open_fn real = REAL(MPI_File_open);
    if (iez_busy || !filename)
        return real(comm, filename, amode, info, fh);
    const struct iez_config *cfg = iez_cfg();
    const char *path = strip_fs_prefix(filename);
    struct iez_created c = { 0 };
    /* With MPI_MODE_EXCL the amode must stay as given on every rank: the POSIX
     * open inside MPI places the file instead. O_EXCL below keeps one creator. */
    int decided = cfg->mode == IEZ_MODE_PLACE && (amode & MPI_MODE_CREATE) && !(amode & MPI_MODE_EXCL);
    if (decided)
        iez_place_before(AT_FDCWD, path, 0666, &c);
    iez_decided += decided; /* the opens inside MPI must not look the same file up again */
    int rc = real(comm, filename, amode, info, fh);
    iez_decided -= decided;
    /* A collective call cannot be repeated on one rank alone: remove what iez created and
     * return the failure, which did not come from the file iez made (it was new and empty). */
    if (rc != 0 && c.created)
        iez_place_undo(AT_FDCWD, path, &c);
    if (rc == 0 && cfg->mode == IEZ_MODE_TRACE && fh) {
        int saved = errno;
        struct traced_open t = { path, *fh };
        iez_on_stack(bind_traced, &t);
        errno = saved;
    }
    return rc;
}

IEZ_EXPORT int MPI_File_close(handle *fh)
{
    if (fh)
        bound(*fh, 1);
    return REAL(MPI_File_close)(fh);
}

static void count(handle fh, int rc, int n, handle datatype)
{
    if (rc != 0 || n <= 0 || iez_cfg()->mode != IEZ_MODE_TRACE)
        return;
    void *record = bound(fh, 0);
    if (!record)
        return;
    int saved = errno;
    int size = 0;
    if (REAL(MPI_Type_size)(datatype, &size) == 0 && size > 0)
        iez_trace_add_bytes(record, (uint64_t)n * (uint64_t)size);
    errno = saved;
}

#define MPI_WRITE(name)                                                                         \
    IEZ_EXPORT int name(handle fh, const void *buf, int n, handle dt, handle status)            \
    {                                                                                           \
        iez_in_mpi_write++;                                                                     \
        int rc = REAL(name)(fh, buf, n, dt, status); \
        iez_in_mpi_write--;                                                                     \
        count(fh, rc, n, dt);                                                                   \
        return rc;                                                                              \
    }
#define MPI_WRITE_AT(name)                                                                      \
    IEZ_EXPORT int name(handle fh, mpi_offset off, const void *buf, int n, handle dt, handle status) \
    {                                                                                           \
        iez_in_mpi_write++;                                                                     \
        int rc = REAL(name)(    \
            fh, off, buf, n, dt, status);                                                       \
        iez_in_mpi_write--;                                                                     \
        count(fh, rc, n, dt);                                                                   \
        return rc;                                                                              \
    }
#define MPI_WRITE_BEGIN(name)                                                                   \
    IEZ_EXPORT int name(handle fh, const void *buf, int n, handle dt)                           \
    {                                                                                           \
        iez_in_mpi_write++;                                                                     \
        int rc = REAL(name)(fh, buf, n, dt);        \
        iez_in_mpi_write--;                                                                     \
        count(fh, rc, n, dt);                                                                   \
        return rc;                                                                              \
    }

MPI_WRITE(MPI_File_write)
MPI_WRITE(MPI_File_write_all)
MPI_WRITE(MPI_File_write_shared)
MPI_WRITE(MPI_File_write_ordered)
MPI_WRITE(MPI_File_iwrite)        /* the last argument is an MPI_Request*, passed through */
MPI_WRITE(MPI_File_iwrite_all)
MPI_WRITE(MPI_File_iwrite_shared)
MPI_WRITE_AT(MPI_File_write_at)
MPI_WRITE_AT(MPI_File_write_at_all)
MPI_WRITE_AT(MPI_File_iwrite_at)
MPI_WRITE_AT(MPI_File_iwrite_at_all)
MPI_WRITE_BEGIN(MPI_File_write_all_begin)
MPI_WRITE_BEGIN(MPI_File_write_ordered_begin)

IEZ_EXPORT int MPI_File_write_at_all_begin(handle fh, mpi_offset off, const void *buf, int n, handle dt)
{
    iez_in_mpi_write++;
    int rc = REAL(MPI_File_write_at_all_begin)(
        fh, off, buf, n, dt);
    iez_in_mpi_write--;
    count(fh, rc, n, dt);
    return rc;
}

/* ---- HDF5 ------------------------------------------------------------------ */

IEZ_EXPORT int64_t H5Fcreate(const char *name, unsigned flags, int64_t fcpl, int64_t fapl)
{
    iez_H5Fcreate_fn real = REAL(H5Fcreate);
    /* H5F_ACC_EXCL must fail on an existing file, so that case is left to the open() HDF5 makes. */
    if (!iez_busy && name && !(flags & H5F_ACC_EXCL) && iez_cfg()->mode == IEZ_MODE_PLACE) {
        struct iez_created c = { 0 };
        iez_place_before(AT_FDCWD, name, 0666, &c);
        iez_decided++; /* HDF5's own open() of the file is not looked up again */
        int64_t id = real(name, flags, fcpl, fapl);
        iez_decided--;
        /* parallel HDF5 makes H5Fcreate collective: never repeat it on one rank; undo only */
        if (id < 0 && c.created)
            iez_place_undo(AT_FDCWD, name, &c);
        return id;
    }
    return real(name, flags, fcpl, fapl);
}
