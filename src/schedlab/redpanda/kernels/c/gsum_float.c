// Dynamatic's gsum in its original float form: a polynomial of every non-negative element,
// summed (IEEE binary32; constants converted to float as Dynamatic writes them)
#define N 4
#define NN (4 * N)

float gsum_float(float a[NN]) {
  float s = 0.0;
  for (int i = 0; i < NN; i++) {
    float d = a[i];
    if (d >= 0)
      s += ((((d + (float)0.64) * d + (float)0.7) * d + (float)0.21) * d + (float)0.33) * d;
  }
  return s;
}
