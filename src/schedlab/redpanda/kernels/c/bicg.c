// s = r^T A, q = A p (PolyBench bicg, integer)
#define N 4

void bicg(int A[N][N], int r[N], int p[N], int s[N], int q[N]) {
  for (int i = 0; i < N; i++) {
    int ri = r[i];
    int acc = 0;
    for (int j = 0; j < N; j++) {
      int a = A[i][j];
      s[j] = s[j] + ri * a;
      acc += a * p[j];
    }
    q[i] = acc;
  }
}
