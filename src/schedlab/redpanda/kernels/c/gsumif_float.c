// Dynamatic's gsumif in float form: one of two polynomials per non-negative element, summed
#define N 4
#define NN (4 * N)

float gsumif_float(float a[NN]) {
  float s = 0.0;
  for (int i = 0; i < NN; i++) {
    float d = a[i];
    if (d >= 0) {
      float p;
      if (i < NN / 2)
        p = ((d + 0.64f) * d + 0.7f) * d + 0.21f;
      else
        p = ((d * 2.0f - 0.25f) * d + 1.5f) / (d + 1.0f);
      s += p;
    }
  }
  return s;
}
