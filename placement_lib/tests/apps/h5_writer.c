/* HDF5 writer for the placement tests.
 *
 *   h5_writer FILE N          create FILE (H5F_ACC_TRUNC) with dataset "/data":
 *                             N doubles, value i at index i; print "wrote N"
 *   h5_writer FILE N verify   open FILE read-only and check "/data" holds
 *                             exactly those N values; print "verified N"
 *
 * Exit status 0 on success, 1 on any HDF5 failure or mismatch.
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int write_file(const char *path, hsize_t n)
{
    double *v = malloc(n * sizeof *v);
    for (hsize_t i = 0; i < n; i++)
        v[i] = (double)i;
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "H5Fcreate %s failed\n", path);
        return 1;
    }
    hid_t space = H5Screate_simple(1, &n, NULL);
    hid_t set = H5Dcreate2(f, "/data", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = set < 0 ? -1 : H5Dwrite(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    if (set >= 0)
        H5Dclose(set);
    H5Sclose(space);
    if (H5Fclose(f) < 0 || rc < 0) {
        fprintf(stderr, "writing %s failed\n", path);
        return 1;
    }
    free(v);
    printf("wrote %llu\n", (unsigned long long)n);
    return 0;
}

static int verify_file(const char *path, hsize_t n)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "H5Fopen %s failed\n", path);
        return 1;
    }
    hid_t set = H5Dopen2(f, "/data", H5P_DEFAULT);
    if (set < 0) {
        fprintf(stderr, "no /data in %s\n", path);
        H5Fclose(f);
        return 1;
    }
    hid_t space = H5Dget_space(set);
    hsize_t dims[1] = { 0 };
    int ok = H5Sget_simple_extent_ndims(space) == 1 && H5Sget_simple_extent_dims(space, dims, NULL) == 1 &&
             dims[0] == n;
    double *v = malloc((n ? n : 1) * sizeof *v);
    if (ok && H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
        ok = 0;
    for (hsize_t i = 0; ok && i < n; i++)
        if (v[i] != (double)i)
            ok = 0;
    free(v);
    H5Sclose(space);
    H5Dclose(set);
    H5Fclose(f);
    if (!ok) {
        fprintf(stderr, "%s: /data does not hold 0..%llu\n", path, (unsigned long long)n - 1);
        return 1;
    }
    printf("verified %llu\n", (unsigned long long)n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: h5_writer FILE N [verify]\n");
        return 2;
    }
    hsize_t n = (hsize_t)strtoull(argv[2], NULL, 10);
    if (argc > 3 && !strcmp(argv[3], "verify"))
        return verify_file(argv[1], n);
    return write_file(argv[1], n);
}
