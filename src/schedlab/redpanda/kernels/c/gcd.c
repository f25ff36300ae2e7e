// Euclid's gcd of every pair (a[i], b[i]) into g[i] (data-dependent trip counts)
#define N 4

void gcd(int a[N], int b[N], int g[N]) {
  for (int i = 0; i < N; i++) {
    int u = a[i], v = b[i];
    while (v != 0) {
      int m = u % v;
      u = v;
      v = m;
    }
    g[i] = u;
  }
}
