// conditional stores inside branches: positives to p[i], the rest accumulate in neg[0]
#define N 4
#define NN (4 * N)

void condstore(int a[NN], int p[NN], int neg[1]) {
  for (int i = 0; i < NN; i++) {
    int v = a[i];
    if (v > 0)
      p[i] = v * v;
    else
      neg[0] += v;
  }
}
