// two Jacobi-1D sweeps per time step (PolyBench jacobi-1d, integer average)
#define N 4

void jacobi1d(int a[N], int b[N]) {
  for (int t = 0; t < 2; t++) {
    for (int i = 1; i < N - 1; i++)
      b[i] = (a[i - 1] + a[i] + a[i + 1]) / 3;
    for (int i = 1; i < N - 1; i++)
      a[i] = (b[i - 1] + b[i] + b[i + 1]) / 3;
  }
}
