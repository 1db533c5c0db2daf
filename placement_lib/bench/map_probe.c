/* Times lookups in a layout map from C, the way libiez makes them, and (built
 * with -DWITH_LMDB) the same lookups in an LMDB environment, for
 * benchmarks/map_format.py and benchmarks/preload_latency.py.
 *
 *   map_probe cdb MAP PATHS N    N lookups of paths drawn from the file PATHS
 *   map_probe lmdb DIR PATHS N   (WITH_LMDB) the same in an LMDB environment
 *
 * Prints one JSON object: lookups, found, ns_per_lookup (mean), p50_ns and
 * p99_ns of batches of 64 lookups (per lookup), load_us. */
#include "iez.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef WITH_LMDB
#include <lmdb.h>
#endif

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static struct iez_alloc alloc;

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: map_probe cdb|lmdb MAP PATHS N\n");
        return 2;
    }
    long n = atol(argv[4]);
    FILE *f = fopen(argv[3], "r");
    if (!f || n <= 0) {
        perror(argv[3]);
        return 2;
    }
    size_t cap = 1024, count = 0;
    char **paths = malloc(cap * sizeof *paths);
    char line[IEZ_PATH_MAX + 2];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (count == cap)
            paths = realloc(paths, (cap *= 2) * sizeof *paths);
        paths[count++] = strdup(line);
    }
    fclose(f);
    if (!count)
        return 2;
    /* the order of the lookups, drawn beforehand so that drawing costs nothing in the timing */
    size_t *order = malloc((size_t)n * sizeof *order);
    unsigned long long x = 88172645463325252ULL;
    for (long i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        order[i] = (size_t)(x % count);
    }
    long batches = (n + 63) / 64, found = 0;
    long long *per = malloc((size_t)batches * sizeof *per);
    long long t0 = now_ns(), load_ns = 0, total = 0;
    if (!strcmp(argv[1], "cdb")) {
        iez_map_load(argv[2]);
        load_ns = now_ns() - t0;
        if (!iez_map_active()) {
            fprintf(stderr, "map_probe: %s is not a usable layout map\n", argv[2]);
            return 1;
        }
        for (long b = 0; b < batches; b++) {
            long lo = b * 64, hi = lo + 64 < n ? lo + 64 : n;
            long long t = now_ns();
            for (long i = lo; i < hi; i++)
                found += iez_map_lookup(paths[order[i]], &alloc) == IEZ_LOOKUP_FOUND;
            per[b] = (now_ns() - t) / (hi - lo);
            total += per[b] * (hi - lo);
        }
#ifdef WITH_LMDB
    } else if (!strcmp(argv[1], "lmdb")) {
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        if (mdb_env_create(&env) || mdb_env_set_mapsize(env, 1ULL << 34) ||
            mdb_env_open(env, argv[2], MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0600)) {
            fprintf(stderr, "map_probe: cannot open the LMDB environment %s\n", argv[2]);
            return 1;
        }
        if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) || mdb_dbi_open(txn, NULL, 0, &dbi))
            return 1;
        mdb_txn_reset(txn);
        load_ns = now_ns() - t0;
        for (long b = 0; b < batches; b++) {
            long lo = b * 64, hi = lo + 64 < n ? lo + 64 : n;
            long long t = now_ns();
            for (long i = lo; i < hi; i++) {
                /* as a library would have to: a read transaction per lookup (renewed, not allocated) */
                MDB_val key = { strlen(paths[order[i]]), paths[order[i]] }, val;
                mdb_txn_renew(txn);
                found += mdb_get(txn, dbi, &key, &val) == 0;
                mdb_txn_reset(txn);
            }
            per[b] = (now_ns() - t) / (hi - lo);
            total += per[b] * (hi - lo);
        }
#endif
    } else {
        fprintf(stderr, "map_probe: unknown kind %s\n", argv[1]);
        return 2;
    }
    qsort(per, (size_t)batches, sizeof *per, cmp_ll);
    printf("{\"lookups\": %ld, \"found\": %ld, \"ns_per_lookup\": %.1f, \"p50_ns\": %lld, \"p99_ns\": %lld, "
           "\"load_us\": %.1f}\n", n, found, (double)total / (double)n, per[batches / 2],
           per[(long)(batches * 0.99) < batches ? (long)(batches * 0.99) : batches - 1], load_ns / 1000.0);
    return 0;
}
