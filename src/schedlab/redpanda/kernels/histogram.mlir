// histogram: h[x[i]] += 1 (indirect, memory-irregular)
func.func @histogram(%x: memref<@NN@xi32>, %h: memref<8xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @NN@ : index
  %one = arith.constant 1 : i32
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<@NN@xi32>
    %b = arith.index_cast %v : i32 to index
    %old = memref.load %h[%b] : memref<8xi32>
    %new = arith.addi %old, %one : i32
    memref.store %new, %h[%b] : memref<8xi32>
  }
  func.return
}
