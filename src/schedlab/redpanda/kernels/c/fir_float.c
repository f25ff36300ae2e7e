// 4-tap float FIR filter with a float-to-int quantised copy: y[i] = sum_k h[k] x[i+k],
// q[i] = (int)(y[i] * 16)
#define N 4
#define N4 (N + 4)

void fir_float(float x[N4], float h[4], float y[N], int q[N]) {
  for (int i = 0; i < N; i++) {
    float acc = 0.0f;
    for (int k = 0; k < 4; k++)
      acc += x[i + k] * h[k];
    y[i] = acc;
    q[i] = (int)(acc * 16);
  }
}
