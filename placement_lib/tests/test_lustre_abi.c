/* Pins libiez's Lustre definitions against the values in Lustre's public
 * lustre/include/uapi/linux/lustre/lustre_user.h: a Lustre client would
 * silently misread a layout whose offsets drifted, so every one is checked. */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "lustre.h"

static int failures;
#define EQ(what, got, want)                                                                   \
    do {                                                                                      \
        unsigned long long g_ = (unsigned long long)(got), w_ = (unsigned long long)(want);   \
        if (g_ != w_) {                                                                       \
            fprintf(stderr, "FAIL %s: got %#llx, want %#llx\n", what, g_, w_);                \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

int main(void)
{
    EQ("LL_SUPER_MAGIC", IEZ_LL_SUPER_MAGIC, 0x0BD00BD0);
    EQ("LOV_USER_MAGIC_V1", IEZ_LOV_USER_MAGIC_V1, 0x0BD10BD0);
    EQ("LOV_USER_MAGIC_V3", IEZ_LOV_USER_MAGIC_V3, 0x0BD30BD0);
    EQ("LOV_USER_MAGIC_SPECIFIC", IEZ_LOV_USER_MAGIC_SPECIFIC, 0x0BD50BD0);
    EQ("LOV_USER_MAGIC_COMP_V1", IEZ_LOV_USER_MAGIC_COMP_V1, 0x0BD60BD0);
    EQ("LOV_PATTERN_RAID0", IEZ_LOV_PATTERN_RAID0, 0x1);
    EQ("LOV_MAXPOOLNAME", IEZ_LOV_MAXPOOLNAME, 15);
    EQ("LOV_MAX_STRIPE_COUNT", IEZ_LOV_MAX_STRIPE_COUNT, 2000);
    /* O_LOV_DELAY_CREATE = 0100000000 | O_NOCTTY | FASYNC */
    EQ("O_LOV_DELAY_CREATE_1_8", IEZ_O_LOV_DELAY_CREATE_1_8, 0100000000);
    EQ("O_LOV_DELAY_CREATE", IEZ_O_LOV_DELAY_CREATE, 0100000000 | O_NOCTTY | FASYNC);
    /* _IOW('f', 154, long) and _IOW('f', 155, long) on a 64-bit ABI */
    EQ("LL_IOC_LOV_SETSTRIPE", IEZ_LL_IOC_LOV_SETSTRIPE, 0x4008669A);
    EQ("LL_IOC_LOV_GETSTRIPE", IEZ_LL_IOC_LOV_GETSTRIPE, 0x4008669B);

    EQ("sizeof(ost_id)", sizeof(struct iez_ost_id), 16);
    EQ("sizeof(lov_user_ost_data_v1)", sizeof(struct iez_lov_user_ost_data_v1), 24);
    EQ("offsetof(l_ost_oi)", offsetof(struct iez_lov_user_ost_data_v1, l_ost_oi), 0);
    EQ("offsetof(l_ost_gen)", offsetof(struct iez_lov_user_ost_data_v1, l_ost_gen), 16);
    EQ("offsetof(l_ost_idx)", offsetof(struct iez_lov_user_ost_data_v1, l_ost_idx), 20);

    EQ("sizeof(lov_user_md_v1)", sizeof(struct iez_lov_user_md_v1), 32);
    EQ("v1 lmm_magic", offsetof(struct iez_lov_user_md_v1, lmm_magic), 0);
    EQ("v1 lmm_pattern", offsetof(struct iez_lov_user_md_v1, lmm_pattern), 4);
    EQ("v1 lmm_oi", offsetof(struct iez_lov_user_md_v1, lmm_oi), 8);
    EQ("v1 lmm_stripe_size", offsetof(struct iez_lov_user_md_v1, lmm_stripe_size), 24);
    EQ("v1 lmm_stripe_count", offsetof(struct iez_lov_user_md_v1, lmm_stripe_count), 28);
    EQ("v1 lmm_stripe_offset", offsetof(struct iez_lov_user_md_v1, lmm_stripe_offset), 30);
    EQ("v1 lmm_objects", offsetof(struct iez_lov_user_md_v1, lmm_objects), 32);

    EQ("sizeof(lov_user_md_v3)", sizeof(struct iez_lov_user_md_v3), 48);
    EQ("v3 lmm_magic", offsetof(struct iez_lov_user_md_v3, lmm_magic), 0);
    EQ("v3 lmm_pattern", offsetof(struct iez_lov_user_md_v3, lmm_pattern), 4);
    EQ("v3 lmm_oi", offsetof(struct iez_lov_user_md_v3, lmm_oi), 8);
    EQ("v3 lmm_stripe_size", offsetof(struct iez_lov_user_md_v3, lmm_stripe_size), 24);
    EQ("v3 lmm_stripe_count", offsetof(struct iez_lov_user_md_v3, lmm_stripe_count), 28);
    EQ("v3 lmm_stripe_offset", offsetof(struct iez_lov_user_md_v3, lmm_stripe_offset), 30);
    EQ("v3 lmm_pool_name", offsetof(struct iez_lov_user_md_v3, lmm_pool_name), 32);
    EQ("v3 sizeof(lmm_pool_name)", sizeof(((struct iez_lov_user_md_v3 *)0)->lmm_pool_name), 16);
    EQ("v3 lmm_objects", offsetof(struct iez_lov_user_md_v3, lmm_objects), 48);

    if (failures) {
        fprintf(stderr, "test_lustre_abi: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_lustre_abi: all Lustre constants, sizes and offsets match lustre_user.h\n");
    return 0;
}
