// in-place insertion sort (control-rich and memory-irregular: shifts depend on the data)
#define N 4
#define NN (4 * N)

void isort(int a[NN]) {
  for (int i = 1; i < NN; i++) {
    int key = a[i];
    int j = i;
    while (j > 0 && a[j - 1] > key) {
      a[j] = a[j - 1];
      j--;
    }
    a[j] = key;
  }
}
