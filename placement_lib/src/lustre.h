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
#define IEZ_LOV_USER_MAGIC_FOREIGN 0x0BD70BD0
#define IEZ_LOV_USER_MAGIC_SEL 0x0BD80BD0
#define IEZ_LOV_PATTERN_RAID0 0x001
#define IEZ_LOV_PATTERN_MDT 0x100          /* Data-on-MDT: the component has no OST objects */
#define IEZ_LOV_PATTERN_OVERSTRIPING 0x200 /* several stripes of a component on one OST */
#define IEZ_LOV_PATTERN_F_HOLE 0x40000000
#define IEZ_LOV_PATTERN_F_RELEASED 0x80000000 /* HSM released: no objects */
#define IEZ_LOV_OFFSET_DEFAULT 0xffff      /* lmm_stripe_offset -1: Lustre chooses the OSTs */
#define IEZ_LOV_ALL_STRIPES 0xffff         /* lmm_stripe_count -1: every OST (of the pool) */
#define IEZ_LOV_ALL_STRIPES_WIDE 0xffe0    /* 0xffe0..0xfffe: overstriping, N stripes per OST */
#define IEZ_LOV_MAXPOOLNAME 15
#define IEZ_LOV_MAX_STRIPE_COUNT 2000
#define IEZ_LOV_MIN_STRIPE_SIZE 65536
#define IEZ_LUSTRE_EOF 0xffffffffffffffffULL
/* lcme_flags */
#define IEZ_LCME_FL_STALE 0x00000001     /* FLR: this mirror's data is behind (a write went to another) */
#define IEZ_LCME_FL_PREF_RD 0x00000002   /* FLR: the mirror reads prefer */
#define IEZ_LCME_FL_PREF_WR 0x00000004   /* FLR: the mirror writes prefer */
#define IEZ_LCME_FL_NOSYNC 0x00000020    /* FLR: not resynced */
#define IEZ_LCME_FL_INIT 0x00000010      /* instantiated: its objects exist */
#define IEZ_LCME_FL_EXTENSION 0x00000040 /* self-extending layouts' extension component */
/* lcme_id: bits 30..16 are the mirror id (FLR) */
#define IEZ_MIRROR_ID_MASK 0x7FFF0000
#define IEZ_MIRROR_ID_SHIFT 16
#define IEZ_SEQ_ID_MASK 0x0000FFFF        /* lcme_id: the component's own id */
/* lcm_flags: the file's FLR state */
#define IEZ_LCM_FL_RDONLY 0x1             /* every mirror in sync */
#define IEZ_LCM_FL_WRITE_PENDING 0x2      /* written: mirrors but the written one are stale */
#define IEZ_LCM_FL_SYNC_PENDING 0x3       /* a resync is under way */
#define IEZ_LCM_FL_FLR_MASK 0x3
#define IEZ_LUSTRE_MIRROR_COUNT_MAX 16    /* FLR's limit on mirrors (iez places at most IEZ_MAX_MIRRORS) */
/* O_LOV_DELAY_CREATE: the 1.8 bit plus O_NOCTTY|FASYNC (meaningless on regular files). */
#define IEZ_O_LOV_DELAY_CREATE_1_8 0100000000
#define IEZ_O_LOV_DELAY_CREATE (IEZ_O_LOV_DELAY_CREATE_1_8 | 0400 /* O_NOCTTY */ | 020000 /* FASYNC */)
#define IEZ_LL_IOC_LOV_SETSTRIPE _IOW('f', 154, long)
#define IEZ_LL_IOC_LOV_GETSTRIPE _IOW('f', 155, long)
#define IEZ_LL_IOC_FLR_SET_MIRROR _IOW('f', 177, long) /* a descriptor's reads from one FLR copy */

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

struct iez_lu_extent {
    uint64_t e_start;
    uint64_t e_end; /* IEZ_LUSTRE_EOF: to the end of the file */
} __attribute__((packed));

/* One component of a composite layout: its extent and where its lov_user_md is. */
struct iez_lov_comp_md_entry_v1 {
    uint32_t lcme_id;
    uint32_t lcme_flags;
    struct iez_lu_extent lcme_extent;
    uint32_t lcme_offset; /* of its lov_user_md, from the start of the lov_comp_md_v1 */
    uint32_t lcme_size;   /* of its lov_user_md */
    uint32_t lcme_layout_gen;
    uint64_t lcme_timestamp;
    uint32_t lcme_padding_1;
} __attribute__((packed));

/* A composite (PFL) layout: this header, the entries, then each component's lov_user_md. */
struct iez_lov_comp_md_v1 {
    uint32_t lcm_magic; /* LOV_USER_MAGIC_COMP_V1 */
    uint32_t lcm_size;  /* everything, this header included */
    uint32_t lcm_layout_gen;
    uint16_t lcm_flags;
    uint16_t lcm_entry_count;
    uint16_t lcm_mirror_count; /* mirrors - 1 */
    uint16_t lcm_padding1[3];
    uint64_t lcm_padding2;
    struct iez_lov_comp_md_entry_v1 lcm_entries[];
} __attribute__((packed));

#endif
