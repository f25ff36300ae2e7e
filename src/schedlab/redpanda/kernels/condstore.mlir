// conditional stores inside branches: positives to p[i], the rest accumulate in neg[0]
func.func @condstore(%a: memref<@NN@xi32>, %p: memref<@NN@xi32>, %neg: memref<1xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @NN@ : index
  %z = arith.constant 0 : i32
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %a[%i] : memref<@NN@xi32>
    %pos = arith.cmpi sgt, %v, %z : i32
    scf.if %pos {
      %d = arith.muli %v, %v : i32
      memref.store %d, %p[%i] : memref<@NN@xi32>
    } else {
      %o = memref.load %neg[%c0] : memref<1xi32>
      %s = arith.addi %o, %v : i32
      memref.store %s, %neg[%c0] : memref<1xi32>
    }
  }
  func.return
}
