// 4-tap FIR filter: y[i] = sum_k h[k] x[i+k]
#define N 4
#define N4 (N + 4)

void fir(int x[N4], int h[4], int y[N]) {
  for (int i = 0; i < N; i++) {
    int acc = 0;
    for (int k = 0; k < 4; k++)
      acc += x[i + k] * h[k];
    y[i] = acc;
  }
}
