// Kafka's own Java producer (kafka-clients 4.x), for tests/protocol/test_transaction_version.py:
// three transactions of one record each on partition 0 of the topic, the second aborted. The client
// picks transaction version 2 (EndTxn v5, no AddPartitionsToTxn) from the finalized features.
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnLevels {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("transactional.id", a[1]);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p)) {
            pr.initTransactions();
            for (int i = 0; i < 3; i++) {
                pr.beginTransaction();
                pr.send(new ProducerRecord<>(a[2], 0, null, "j" + i)).get();
                if (i == 1) pr.abortTransaction(); else pr.commitTransaction();
            }
        }
        System.out.println("OK");
    }
}
