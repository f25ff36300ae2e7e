/* Replay driver for the reference X-Bucket implementation (cctools dttools bucketing_manager).
 *
 * Written for schedlab's side-by-side check (docs/systems/xbucket.md); it only calls the
 * reference's public API: one bucketing manager per task category, default parameters
 * (10 sampling tasks, 1 core / 1000 MB / 1000 MB first, x2 growth, <= 10 buckets), the same
 * one-task-at-a-time replay and waste accounting as schedlab.xbucket.simulator.
 *
 * Input (stdin): "category cores memory disk wall_time" per line.
 * Usage: xbucket_ref_driver MODE SEMANTICS KILL_FRACTION [RESOURCE]
 *   MODE: greedy | exhaust | det-greedy | det-exhaust | quantized
 *   SEMANTICS: peak (a failure reports the true peak) | allocation (it reports the limit)
 *   RESOURCE: cores | memory | disk replays that type alone (per-resource, as
 *     schedlab.xbucket.simulator with only=RESOURCE): every other type gets exactly the task's
 *     peak, so only RESOURCE can fail; only efficiency_RESOURCE is meaningful. Omitted: joint.
 * Output: one line of key=value pairs (efficiencies, retries, predict/add timings in ns).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bucketing_manager.h"
#include "random.h"
#include "rmsummary.h"

#define MAX_CATEGORIES 64
static const char *NAMES[3] = {"cores", "memory", "disk"};

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static bucketing_mode_t parse_mode(const char *s)
{
	if (!strcmp(s, "greedy")) return BUCKETING_MODE_GREEDY;
	if (!strcmp(s, "exhaust")) return BUCKETING_MODE_EXHAUSTIVE;
	if (!strcmp(s, "det-greedy")) return BUCKETING_MODE_DET_GREEDY;
	if (!strcmp(s, "det-exhaust")) return BUCKETING_MODE_DET_EXHAUSTIVE;
	if (!strcmp(s, "quantized")) return BUCKETING_MODE_QUANTIZED;
	fprintf(stderr, "unknown mode %s\n", s);
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: %s MODE peak|allocation KILL_FRACTION [RESOURCE] < tasks\n",
			argv[0]);
		return 2;
	}
	int only = -1; /* per-resource: the one type replayed; -1 = joint */
	if (argc == 5) {
		for (int r = 0; r < 3; r++)
			if (!strcmp(argv[4], NAMES[r])) only = r;
		if (only < 0) { fprintf(stderr, "unknown resource %s\n", argv[4]); return 2; }
	}
	bucketing_mode_t mode = parse_mode(argv[1]);
	int report_peak = !strcmp(argv[2], "peak");
	double kill_fraction = atof(argv[3]);
	random_init();
	int trace_attempts = getenv("XBUCKET_REF_TRACE") != NULL; /* per-attempt lines on stderr */

	char cats[MAX_CATEGORIES][64];
	bucketing_manager_t *managers[MAX_CATEGORIES];
	int ncat = 0;
	double alloc_sum[3] = {0}, used_sum[3] = {0};
	long retries = 0, ntasks = 0, npred = 0, nadd = 0, cap = 1 << 16;
	double *pred_ns = malloc(cap * sizeof(double)), *add_ns = malloc(cap * sizeof(double));
	char cat[64];
	double peak[3], wall;

	while (scanf("%63s %lf %lf %lf %lf", cat, &peak[0], &peak[1], &peak[2], &wall) == 5) {
		int c = 0;
		while (c < ncat && strcmp(cats[c], cat)) c++;
		if (c == ncat) {
			if (ncat == MAX_CATEGORIES) { fprintf(stderr, "too many categories\n"); return 2; }
			strcpy(cats[ncat], cat);
			if (only < 0) {
				managers[ncat++] = bucketing_manager_initialize(mode);
			} else { /* per-resource: a state for that type only (the others are never short) */
				managers[ncat] = bucketing_manager_create(mode);
				bucketing_manager_add_resource_type(managers[ncat++], NAMES[only], 1, 0, 0, 0,
								    0, 0);
			}
		}
		for (;;) {
			double t0 = now_ns();
			struct rmsummary *pred = bucketing_manager_predict(managers[c], (int)ntasks);
			double t1 = now_ns();
			if (npred == cap || nadd == cap) {
				cap *= 2;
				pred_ns = realloc(pred_ns, cap * sizeof(double));
				add_ns = realloc(add_ns, cap * sizeof(double));
			}
			pred_ns[npred++] = t1 - t0;
			double alloc[3];
			int failed = 0;
			for (int r = 0; r < 3; r++) {
				alloc[r] = rmsummary_get(pred, NAMES[r]);
				if (only >= 0 && r != only) alloc[r] = peak[r];
				if (peak[r] > alloc[r]) failed = 1;
			}
			if (trace_attempts)
				fprintf(stderr, "%ld %g %g %g\n", ntasks, alloc[0], alloc[1], alloc[2]);
			struct rmsummary *rep = rmsummary_create(-1);
			rmsummary_set(rep, "gpus", 0);
			if (failed) rep->limits_exceeded = rmsummary_create(-1);
			for (int r = 0; r < 3; r++) {
				int over = peak[r] > alloc[r];
				rmsummary_set(rep, NAMES[r], (over && !report_peak) ? alloc[r] : peak[r]);
				if (over) rmsummary_set(rep->limits_exceeded, NAMES[r], alloc[r]);
				double duration = failed ? wall * kill_fraction : wall;
				alloc_sum[r] += alloc[r] * duration;
				if (!failed) used_sum[r] += peak[r] * wall;
			}
			t0 = now_ns();
			bucketing_manager_add_resource_report(managers[c], (int)ntasks, rep, !failed);
			add_ns[nadd++] = now_ns() - t0;
			rmsummary_delete(rep);
			rmsummary_delete(pred);
			if (!failed) break;
			retries++;
		}
		ntasks++;
	}
	double pmean = 0, amean = 0;
	for (long i = 0; i < npred; i++) pmean += pred_ns[i];
	for (long i = 0; i < nadd; i++) amean += add_ns[i];
	pmean /= npred ? npred : 1;
	amean /= nadd ? nadd : 1;
	qsort(pred_ns, npred, sizeof(double), cmp_double);
	double p99 = npred ? pred_ns[(long)(0.99 * (npred - 1))] : 0;
	printf("tasks=%ld retries=%ld", ntasks, retries);
	for (int r = 0; r < 3; r++)
		printf(" efficiency_%s=%.6f", NAMES[r], alloc_sum[r] > 0 ? used_sum[r] / alloc_sum[r] : 0);
	printf(" predict_mean_ns=%.1f predict_p99_ns=%.1f add_mean_ns=%.1f\n", pmean, p99, amean);
	return 0;
}
