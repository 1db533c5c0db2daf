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
    EQ("LOV_USER_MAGIC_FOREIGN", IEZ_LOV_USER_MAGIC_FOREIGN, 0x0BD70BD0);
    EQ("LOV_USER_MAGIC_SEL", IEZ_LOV_USER_MAGIC_SEL, 0x0BD80BD0);
    EQ("LOV_PATTERN_RAID0", IEZ_LOV_PATTERN_RAID0, 0x1);
    EQ("LOV_PATTERN_MDT", IEZ_LOV_PATTERN_MDT, 0x100);
    EQ("LOV_PATTERN_OVERSTRIPING", IEZ_LOV_PATTERN_OVERSTRIPING, 0x200);
    EQ("LOV_PATTERN_F_HOLE", IEZ_LOV_PATTERN_F_HOLE, 0x40000000);
    EQ("LOV_PATTERN_F_RELEASED", IEZ_LOV_PATTERN_F_RELEASED, 0x80000000);
    EQ("LOV_OFFSET_DEFAULT", IEZ_LOV_OFFSET_DEFAULT, 0xffff);   /* (__u16)-1 */
    EQ("LOV_ALL_STRIPES", IEZ_LOV_ALL_STRIPES, 0xffff);
    EQ("LOV_ALL_STRIPES_WIDE", IEZ_LOV_ALL_STRIPES_WIDE, 0xffe0); /* Lustre 2.16: -N stripes per OST below 0xffff */
    EQ("LOV_MAXPOOLNAME", IEZ_LOV_MAXPOOLNAME, 15);
    EQ("LOV_MAX_STRIPE_COUNT", IEZ_LOV_MAX_STRIPE_COUNT, 2000);
    EQ("LOV_MIN_STRIPE_SIZE", IEZ_LOV_MIN_STRIPE_SIZE, 1 << 16); /* 1 << LOV_MIN_STRIPE_BITS */
    EQ("LUSTRE_EOF", IEZ_LUSTRE_EOF, 0xffffffffffffffffULL);
    EQ("LCME_FL_INIT", IEZ_LCME_FL_INIT, 0x10);
    EQ("LCME_FL_EXTENSION", IEZ_LCME_FL_EXTENSION, 0x40);
    EQ("MIRROR_ID_MASK", IEZ_MIRROR_ID_MASK, 0x7FFF0000);
    EQ("MIRROR_ID_SHIFT", IEZ_MIRROR_ID_SHIFT, 16);
    /* FLR (File Level Redundancy): mirrored composite layouts */
    EQ("LCME_FL_STALE", IEZ_LCME_FL_STALE, 0x1);
    EQ("LCME_FL_PREF_RD", IEZ_LCME_FL_PREF_RD, 0x2);
    EQ("LCME_FL_PREF_WR", IEZ_LCME_FL_PREF_WR, 0x4);
    EQ("LCME_FL_NOSYNC", IEZ_LCME_FL_NOSYNC, 0x20);
    EQ("SEQ_ID_MASK", IEZ_SEQ_ID_MASK, 0x0000FFFF);
    EQ("LCM_FL_RDONLY", IEZ_LCM_FL_RDONLY, 0x1);
    EQ("LCM_FL_WRITE_PENDING", IEZ_LCM_FL_WRITE_PENDING, 0x2);
    EQ("LCM_FL_SYNC_PENDING", IEZ_LCM_FL_SYNC_PENDING, 0x3);
    EQ("LCM_FL_FLR_MASK", IEZ_LCM_FL_FLR_MASK, 0x3);
    EQ("LUSTRE_MIRROR_COUNT_MAX", IEZ_LUSTRE_MIRROR_COUNT_MAX, 16);
    /* mirror_id_of(lcme_id) and pack_id: mirror 2, component 5 */
    EQ("mirror id of 0x00020005", (0x00020005u & IEZ_MIRROR_ID_MASK) >> IEZ_MIRROR_ID_SHIFT, 2);
    EQ("component id of 0x00020005", 0x00020005u & IEZ_SEQ_ID_MASK, 5);
    /* O_LOV_DELAY_CREATE = 0100000000 | O_NOCTTY | FASYNC */
    EQ("O_LOV_DELAY_CREATE_1_8", IEZ_O_LOV_DELAY_CREATE_1_8, 0100000000);
    EQ("O_LOV_DELAY_CREATE", IEZ_O_LOV_DELAY_CREATE, 0100000000 | O_NOCTTY | FASYNC);
    /* _IOW('f', 154, long) and _IOW('f', 155, long) on a 64-bit ABI */
    EQ("LL_IOC_LOV_SETSTRIPE", IEZ_LL_IOC_LOV_SETSTRIPE, 0x4008669A);
    EQ("LL_IOC_FLR_SET_MIRROR", IEZ_LL_IOC_FLR_SET_MIRROR, 0x400866B1);
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

    EQ("sizeof(lu_extent)", sizeof(struct iez_lu_extent), 16);
    EQ("lu_extent e_start", offsetof(struct iez_lu_extent, e_start), 0);
    EQ("lu_extent e_end", offsetof(struct iez_lu_extent, e_end), 8);

    EQ("sizeof(lov_comp_md_entry_v1)", sizeof(struct iez_lov_comp_md_entry_v1), 48);
    EQ("lcme_id", offsetof(struct iez_lov_comp_md_entry_v1, lcme_id), 0);
    EQ("lcme_flags", offsetof(struct iez_lov_comp_md_entry_v1, lcme_flags), 4);
    EQ("lcme_extent", offsetof(struct iez_lov_comp_md_entry_v1, lcme_extent), 8);
    EQ("lcme_offset", offsetof(struct iez_lov_comp_md_entry_v1, lcme_offset), 24);
    EQ("lcme_size", offsetof(struct iez_lov_comp_md_entry_v1, lcme_size), 28);
    EQ("lcme_layout_gen", offsetof(struct iez_lov_comp_md_entry_v1, lcme_layout_gen), 32);
    EQ("lcme_timestamp", offsetof(struct iez_lov_comp_md_entry_v1, lcme_timestamp), 36);
    EQ("lcme_padding_1", offsetof(struct iez_lov_comp_md_entry_v1, lcme_padding_1), 44);

    EQ("sizeof(lov_comp_md_v1)", sizeof(struct iez_lov_comp_md_v1), 32);
    EQ("lcm_magic", offsetof(struct iez_lov_comp_md_v1, lcm_magic), 0);
    EQ("lcm_size", offsetof(struct iez_lov_comp_md_v1, lcm_size), 4);
    EQ("lcm_layout_gen", offsetof(struct iez_lov_comp_md_v1, lcm_layout_gen), 8);
    EQ("lcm_flags", offsetof(struct iez_lov_comp_md_v1, lcm_flags), 12);
    EQ("lcm_entry_count", offsetof(struct iez_lov_comp_md_v1, lcm_entry_count), 14);
    EQ("lcm_mirror_count", offsetof(struct iez_lov_comp_md_v1, lcm_mirror_count), 16);
    EQ("lcm_padding1", offsetof(struct iez_lov_comp_md_v1, lcm_padding1), 18);
    EQ("lcm_padding2", offsetof(struct iez_lov_comp_md_v1, lcm_padding2), 24);
    EQ("lcm_entries", offsetof(struct iez_lov_comp_md_v1, lcm_entries), 32);

    if (failures) {
        fprintf(stderr, "test_lustre_abi: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_lustre_abi: all Lustre constants, sizes and offsets match lustre_user.h\n");
    return 0;
}
