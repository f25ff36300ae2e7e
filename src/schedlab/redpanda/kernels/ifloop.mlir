// control-rich loop: b[i] = a[i] > 0 ? 3 a[i] + 1 : -a[i]; returns the count of positives
func.func @ifloop(%a: memref<@NN@xi32>, %b: memref<@NN@xi32>) -> i32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @NN@ : index
  %z = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %three = arith.constant 3 : i32
  %cnt = scf.for %i = %c0 to %n step %c1 iter_args(%k = %z) -> (i32) {
    %v = memref.load %a[%i] : memref<@NN@xi32>
    %pos = arith.cmpi sgt, %v, %z : i32
    %r:2 = scf.if %pos -> (i32, i32) {
      %m = arith.muli %v, %three : i32
      %p = arith.addi %m, %one : i32
      %k1 = arith.addi %k, %one : i32
      scf.yield %p, %k1 : i32, i32
    } else {
      %ng = arith.subi %z, %v : i32
      scf.yield %ng, %k : i32, i32
    }
    memref.store %r#0, %b[%i] : memref<@NN@xi32>
    scf.yield %r#1 : i32
  }
  func.return %cnt : i32
}
