/* Applying a layout on a real Lustre client: LL_IOC_LOV_SETSTRIPE on a file
 * opened with O_LOV_DELAY_CREATE, with LOV_USER_MAGIC_SPECIFIC so Lustre takes
 * the exact OST list instead of choosing its own. */
#include "iez.h"
#include "lustre.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

int iez_is_lustre_dir(const char *abspath_of_file)
{
    char dir[IEZ_PATH_MAX];
    size_t n = strlen(abspath_of_file);
    if (n >= sizeof dir)
        return 0;
    memcpy(dir, abspath_of_file, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    struct statfs fs;
    if (statfs(dir, &fs) != 0)
        return 0;
    return (unsigned long)fs.f_type == (unsigned long)IEZ_LL_SUPER_MAGIC;
}

long iez_lustre_build_lum(const struct iez_layout *l, void *buf, size_t buflen)
{
    if (l->stripe_count < 1 || l->stripe_count > IEZ_LOV_MAX_STRIPE_COUNT || l->stripe_size == 0 ||
        l->stripe_size > 0xffffffffULL || l->stripe_size % 65536 != 0)
        return -1;
    size_t need = sizeof(struct iez_lov_user_md_v3) +
                  (size_t)l->stripe_count * sizeof(struct iez_lov_user_ost_data_v1);
    if (buflen < need)
        return -1;
    memset(buf, 0, need);
    struct iez_lov_user_md_v3 *lum = buf;
    lum->lmm_magic = IEZ_LOV_USER_MAGIC_SPECIFIC;
    lum->lmm_pattern = IEZ_LOV_PATTERN_RAID0;
    lum->lmm_stripe_size = (uint32_t)l->stripe_size;
    lum->lmm_stripe_count = (uint16_t)l->stripe_count;
    lum->lmm_stripe_offset = (uint16_t)l->osts[0];
    for (int i = 0; i < l->stripe_count; i++)
        lum->lmm_objects[i].l_ost_idx = l->osts[i];
    return (long)need;
}

int iez_lustre_setstripe(int fd, const struct iez_layout *l)
{
    size_t len = sizeof(struct iez_lov_user_md_v3) +
                 (size_t)l->stripe_count * sizeof(struct iez_lov_user_ost_data_v1);
    void *buf = malloc(len);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    int rc = -1;
    if (iez_lustre_build_lum(l, buf, len) > 0)
        rc = ioctl(fd, IEZ_LL_IOC_LOV_SETSTRIPE, buf);
    else
        errno = EINVAL;
    free(buf);
    return rc;
}

int iez_lustre_getstripe(int fd, int *stripe_count, uint64_t *stripe_size)
{
    size_t len = sizeof(struct iez_lov_user_md_v3) +
                 IEZ_LOV_MAX_STRIPE_COUNT * sizeof(struct iez_lov_user_ost_data_v1);
    struct iez_lov_user_md_v3 *lum = calloc(1, len);
    if (!lum)
        return -1;
    lum->lmm_magic = IEZ_LOV_USER_MAGIC_V3;
    lum->lmm_stripe_count = IEZ_LOV_MAX_STRIPE_COUNT;
    int rc = ioctl(fd, IEZ_LL_IOC_LOV_GETSTRIPE, lum);
    if (rc == 0 && (lum->lmm_magic == IEZ_LOV_USER_MAGIC_V1 || lum->lmm_magic == IEZ_LOV_USER_MAGIC_V3)) {
        *stripe_count = lum->lmm_stripe_count;
        *stripe_size = lum->lmm_stripe_size;
    } else {
        rc = -1;
    }
    free(lum);
    return rc;
}
