// CSR sparse matrix-vector product (data-dependent loop bounds and gathers)
#define N 4
#define N1 (N + 1)
#define NN (4 * N)

void spmv(int rowptr[N1], int col[NN], int val[NN], int x[N], int y[N]) {
  for (int i = 0; i < N; i++) {
    int s = 0;
    for (int k = rowptr[i]; k < rowptr[i + 1]; k++)
      s += val[k] * x[col[k]];
    y[i] = s;
  }
}
