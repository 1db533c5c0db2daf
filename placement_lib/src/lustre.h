/* The few Lustre user-space definitions libiez needs, written from the public
 * lustre/include/uapi/linux/lustre/lustre_user.h. tests/test_lustre_abi.c pins
 * every constant, size and field offset. */
#ifndef IEZ_LUSTRE_H
#define IEZ_LUSTRE_H

#include <stdint.h>
#include <sys/ioctl.h>

#define IEZ_LL_SUPER_MAGIC 0x0BD00BD0
#define IEZ_LOV_USER_MAGIC_V1 0x0BD10BD0
#define IEZ_LOV_USER_MAGIC_V3 0x0BD30BD0
#define IEZ_LOV_USER_MAGIC_SPECIFIC 0x0BD50BD0
#define IEZ_LOV_USER_MAGIC_COMP_V1 0x0BD60BD0
#define IEZ_LOV_PATTERN_RAID0 0x001
#define IEZ_LOV_MAXPOOLNAME 15
#define IEZ_LOV_MAX_STRIPE_COUNT 2000
/* O_LOV_DELAY_CREATE: the 1.8 bit plus O_NOCTTY|FASYNC (meaningless on regular files). */
#define IEZ_O_LOV_DELAY_CREATE_1_8 0100000000
#define IEZ_O_LOV_DELAY_CREATE (IEZ_O_LOV_DELAY_CREATE_1_8 | 0400 /* O_NOCTTY */ | 020000 /* FASYNC */)
#define IEZ_LL_IOC_LOV_SETSTRIPE _IOW('f', 154, long)
#define IEZ_LL_IOC_LOV_GETSTRIPE _IOW('f', 155, long)

struct iez_ost_id {
    uint64_t oi_id;
    uint64_t oi_seq;
} __attribute__((packed));

struct iez_lov_user_ost_data_v1 {
    struct iez_ost_id l_ost_oi;
    uint32_t l_ost_gen;
    uint32_t l_ost_idx;
} __attribute__((packed));

struct iez_lov_user_md_v1 {
    uint32_t lmm_magic;
    uint32_t lmm_pattern;
    struct iez_ost_id lmm_oi;
    uint32_t lmm_stripe_size;
    uint16_t lmm_stripe_count;
    uint16_t lmm_stripe_offset; /* lmm_layout_gen when read back */
    struct iez_lov_user_ost_data_v1 lmm_objects[];
} __attribute__((packed));

struct iez_lov_user_md_v3 {
    uint32_t lmm_magic;
    uint32_t lmm_pattern;
    struct iez_ost_id lmm_oi;
    uint32_t lmm_stripe_size;
    uint16_t lmm_stripe_count;
    uint16_t lmm_stripe_offset;
    char lmm_pool_name[IEZ_LOV_MAXPOOLNAME + 1];
    struct iez_lov_user_ost_data_v1 lmm_objects[];
} __attribute__((packed));

#endif
