/*-------------------------------------------------------------------------
 *
 * gr_agent.h
 *	  Client of the storage agent's control socket (JSON lines).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GR_AGENT_H
#define GR_AGENT_H

#include "greenreplica.h"

typedef struct GrVolumeInfo
{
	double		spin_up_s;		/* time for the volume to become ready */
	double		spin_down_s;	/* a spin-down, which a wake cannot cut short */
	double		break_even_s;	/* shortest idle time worth a spin-down */
	char		state[GR_STATE_LEN];	/* aggregate power state */
	double		ios;			/* reads + writes the agent's ledger booked */
	double		spin_ups;		/* spin-ups it booked */
} GrVolumeInfo;

/*
 * Each call connects, sends one request and reads one reply, with a short
 * timeout: the agent must never hold up the scheduler, let alone replay.
 * On failure they return false with a message in err.
 */
extern bool gr_agent_volume_info(GrVolumeInfo *info, char *err, size_t errlen);
extern bool gr_agent_wake(double *ready_in_s, char *err, size_t errlen);
extern bool gr_agent_sleep(double expected_idle_s, bool *declined,
						   char *err, size_t errlen);

/*
 * A wake for a window that only writes the given volume extents: a layout
 * with a flash buffer leaves the disks that would hold them asleep.
 */
struct GrExtent;
extern bool gr_agent_wake_writes_only(const struct GrExtent *extents, int count,
									  double *ready_in_s, char *err, size_t errlen);

/* Volume extents the next window reads; *recorded is what the agent kept. */
struct GrExtent;
extern bool gr_agent_hint(const struct GrExtent *extents, int count, int *recorded,
						  char *err, size_t errlen);

/*
 * Mark volume extents hot, cold or normal; *ranges is what the agent holds.
 * *refused tells an agent that answered no (its words in err) from one that
 * could not be asked.
 */
extern bool gr_agent_set_temperature(const struct GrExtent *extents, int count,
									 const char *temperature, int *ranges,
									 bool *refused, char *err, size_t errlen);

/* The volume's alignment boundaries inside a range (gr_align.c uses them). */
extern bool gr_agent_boundaries(uint64 offset, uint64 len, uint64 **bounds,
								int *nbounds, uint64 *complete_to, bool *aligned,
								char *err, size_t errlen);

extern bool gr_agent_volume_capacity(uint64 *capacity, char *err, size_t errlen);

/* True when an agent is configured (greenreplica.agent_socket). */
extern bool gr_agent_configured(void);

#endif							/* GR_AGENT_H */
